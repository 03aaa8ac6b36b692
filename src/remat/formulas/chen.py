"""Closed forms for Chen et al. 2016 ("Training Deep Nets with Sublinear Memory Cost", arXiv 1604.06174) on
the numpy chain of ``remat.chain``: peak stored activation bytes and layer-forward counts per schedule.

What is counted (the store of ``remat.chain`` counts exactly this, by summing ``.nbytes``): every
activation the executor materialises — the chain states x_i (B×d, ``x_bytes`` each, x_0 included) and the
hidden activations h_i = ReLU(x_i·W1 + b1) (B×d', ``h_bytes`` each), including the transient ones of a layer
being evaluated. Parameters, parameter gradients and the running input gradient (one B×d array in backward)
are outside it. One layer evaluation holds its input, h_i and its output at once (x_bytes + h_bytes above
what stays), unless the input is dropped after h_i is made (then h_bytes only).

Derivation for segments(k) (Chen §3, Alg. 1; the last segment keeps its intermediates in the first forward, as
torch's ``checkpoint_sequential`` does, so k = 1 is the plain backward). Segments j = 0..k−1 have n_j layers
(``segment_sizes``, the package's one rule: numpy.array_split's, the first L mod k segments one layer longer). While
segment j is live — its forward with tape, in the first pass (j = k−1) or recomputed in backward (j < k−1) — the store
holds the inputs of segments 0..j ((j + 1)·x_bytes) plus, for each of its n_j layers, h_i and the layer's output
(x_i+1; for the segment's last layer that output is made and dropped at once): n_j·(x_bytes + h_bytes). The
no-tape forward of a segment j < k−1 peaks at (j + 2)·x_bytes + h_bytes, below segment j + 1's live peak.
Hence, exactly,

    peak(k) = max_j [(j + 1)·x_bytes + n_j·(x_bytes + h_bytes)]
            = max(k·x + q·(x + h),  r·x + (q + 1)·(x + h) if r > 0)      with L = q·k + r, 0 ≤ r < k,

and none = segments(1): (L + 1)·x_bytes + L·h_bytes. Forwards: L + (L − n_{k−1}) = 2L − ⌊L/k⌋.
The memory is k·x + (L/k)·(x + h) up to rounding, minimised near k* = √(L·(x + h)/x) — √(2L) when d' = d —
rather than Chen's √L, which weighs a stored segment input and a layer's intermediates alike. The only
approximations in this module are the ones named *_approx and Chen's g(n); the other functions are exact.
"""

from __future__ import annotations

import math
from functools import lru_cache

from remat.errors import UsageError
from remat.formulas import revolve


def check_count(value, field: str) -> int:
    """``value`` if it is an int ≥ 1; UsageError(field) otherwise (layers, k, slots, widths, batch)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(field, f"must be an integer ≥ 1, got {value!r}")
    return value


def activation_bytes(batch: int, width: int, hidden: int, itemsize: int) -> tuple[int, int]:
    """(x_bytes, h_bytes): bytes of one chain state x_i (B×d) and one hidden activation h_i (B×d')."""
    return batch * width * itemsize, batch * hidden * itemsize


def segment_sizes(layers: int, k: int) -> list[int]:
    """Sizes n_0..n_{k−1} of k consecutive segments of ``layers`` layers: THE segments(k) rule of the package
    (numpy engine, torch policies, planner baselines, sweeps). numpy.array_split's rule: the first L mod k
    segments have ⌈L/k⌉ layers, the rest ⌊L/k⌋ — Chen Alg. 1's L/k per segment, rounded so that the longer
    segments come while fewer segment inputs are stored (the lowest peak of any balanced split).
    torch.utils.checkpoint.checkpoint_sequential rounds the other way (⌊L/k⌋ each, the remainder in its last,
    kept segment); at L = 10, k = 3 it gives [3, 3, 4] where this gives [4, 3, 3].
    Raises UsageError("k") unless 1 ≤ k ≤ layers."""
    check_count(layers, "layers")
    check_count(k, "k")
    if k > layers:
        raise UsageError("k", f"{k} segments > layers = {layers} (each segment needs a layer)")
    q, r = divmod(layers, k)
    return [q + 1] * r + [q] * (k - r)


def segment_bounds(layers: int, k: int) -> list[tuple[int, int]]:
    """[start, stop) layer ranges of the k segments of ``segment_sizes(layers, k)``, in order."""
    bounds, start = [], 0
    for n in segment_sizes(layers, k):
        bounds.append((start, start + n))
        start += n
    return bounds


def none_peak_bytes(layers: int, x_bytes: int, h_bytes: int) -> int:
    """Peak stored bytes of the plain backward (keep everything): (L + 1)·x_bytes + L·h_bytes.

    x_0..x_L and h_0..h_{L−1} are all live when the loss is taken. Exact for ``remat.chain``'s store.
    """
    check_count(layers, "layers")
    return (layers + 1) * x_bytes + layers * h_bytes


def segments_peak_bytes(layers: int, k: int, x_bytes: int, h_bytes: int) -> int:
    """Peak stored bytes of segments(k) (Chen Alg. 1, k segments): max_j (j+1)·x + n_j·(x + h).

    = max(k·x + q·(x + h), r·x + (q + 1)·(x + h) [if r > 0]), L = q·k + r. The k segment inputs (x_0 among
    them) AND the live segment's intermediates: a checkpoint's cost includes its segment. Exact (bytes) for
    ``remat.chain``'s store; derivation in the module docstring. Raises UsageError("k") unless 1 ≤ k ≤ L.
    """
    segment_sizes(layers, k)  # validates layers and k
    q, r = divmod(layers, k)
    live = [k * x_bytes + q * (x_bytes + h_bytes)]
    if r:
        live.append(r * x_bytes + (q + 1) * (x_bytes + h_bytes))
    return max(live)


def segments_forwards(layers: int, k: int) -> int:
    """Layer-forward evaluations of segments(k): 2L − ⌊L/k⌋ (every segment but the last is recomputed once).

    k = 1 gives L (the plain backward); k = L gives 2L − 1. Raises UsageError("k") unless 1 ≤ k ≤ L.
    """
    return 2 * layers - segment_sizes(layers, k)[-1]


def optimal_segments(layers: int, x_bytes: int, h_bytes: int) -> int:
    """The integer k in 1..L minimising ``segments_peak_bytes`` (ties: the smallest k, i.e. fewest forwards)."""
    check_count(layers, "layers")
    return min(range(1, layers + 1), key=lambda k: (segments_peak_bytes(layers, k, x_bytes, h_bytes), k))


def optimal_segments_approx(layers: int, x_bytes: int, h_bytes: int) -> float:
    """k* = √(L·(x + h)/x), the minimiser of the continuous k·x + (L/k)·(x + h); √(2L) when d' = d."""
    check_count(layers, "layers")
    return math.sqrt(layers * (x_bytes + h_bytes) / x_bytes)


def sqrt_segments(layers: int) -> int:
    """k for the `sqrt` schedule: ⌈√L⌉ (Chen §4.3 takes k = √n).

    Rounded UP because the exact optimum k* = √(L·(x + h)/x) ≥ √L for every width, and the peak decreases
    in k below k*: of ⌊√L⌋ and ⌈√L⌉, the ceiling is the one on the optimum's side. Exact integer arithmetic.
    """
    check_count(layers, "layers")
    root = math.isqrt(layers)
    return root if root * root == layers else root + 1


def chen_recursive_memory(n: float, k: int = 1) -> float:
    """Chen §4.4: g(n) = k·log_{k+1}(n), the solution of g(n) = k + g(n/(k+1)) (units: stored segment inputs).

    An asymptotic count (continuous n, constants dropped); ``recursive_peak_bytes`` is the exact one.
    """
    check_count(k, "k")
    return k * math.log(n, k + 1)


def recursive_parts(n: int, k: int) -> list[int]:
    """Sizes of the k + 1 parts (fewer if n ≤ k) a recursive segment of n layers is split into (array_split)."""
    return segment_sizes(n, min(k + 1, n))


@lru_cache(maxsize=None)
def _recursive_excess(n: int, k: int, x_bytes: int, h_bytes: int) -> int:
    # Peak above the store's content on entry (which includes the segment's input x_lo).
    if n == 1:
        return x_bytes + h_bytes
    parts = recursive_parts(n, k)
    return max(j * x_bytes + _recursive_excess(p, k, x_bytes, h_bytes) for j, p in enumerate(parts))


def recursive_peak_bytes(layers: int, k: int, x_bytes: int, h_bytes: int) -> int:
    """Peak stored bytes of the recursive schedule (Chen §4.4), exactly: x_bytes + P(L), with
    P(1) = x + h and P(n) = max_j [j·x + P(n_j)] over its k + 1 parts n_j (``recursive_parts``).

    For k = 1 and L = 2^p: (p + 2)·x_bytes + h_bytes — log2 L checkpoints, x_0, one layer's tape.
    Raises UsageError("layers"/"k").
    """
    check_count(layers, "layers")
    check_count(k, "k")
    return x_bytes + _recursive_excess(layers, k, x_bytes, h_bytes)


@lru_cache(maxsize=None)
def recursive_forwards(layers: int, k: int = 1) -> int:
    """Layer-forward evaluations of the recursive schedule, exactly: F(1) = 1,
    F(n) = (n − n_k) + Σ_j F(n_j) (advance through all parts but the last, then reverse each part).

    For k = 1 and L = 2^p: L + (L/2)·log2 L — Chen's O(n log n). Raises UsageError("layers"/"k").
    """
    check_count(layers, "layers")
    check_count(k, "k")
    if layers == 1:
        return 1
    parts = recursive_parts(layers, k)
    return layers - parts[-1] + sum(recursive_forwards(p, k) for p in parts)


def revolve_forwards(layers: int, slots: int) -> int:
    """Layer-forward evaluations of Revolve with ``slots`` slots: L + r·L − β(s + 1, r − 1) (exact)."""
    return layers + revolve.extra_forwards(layers, slots)


def revolve_peak_bytes_bound(layers: int, slots: int, x_bytes: int, h_bytes: int) -> int:
    """Revolve's peak stored bytes: s slots + the working state + one layer's tape (h_i and the layer
    output) = (s + 2)·x_bytes + h_bytes, with s capped at L − 1 (more slots are never used).

    An upper bound for any schedule in the slot model. That it is attained is not derived here: the tests
    find the counted peak of ``remat.schedules.revolve`` equal to it for every L ≤ 40, s ≤ 8.
    """
    check_count(layers, "layers")
    return (min(slots, layers - 1) + 2) * x_bytes + h_bytes
