"""The numpy reference engine for Chen et al. 2016: a chain of L layers, its plain backward, an instrumented
activation store, and ONE executor that runs any checkpoint schedule of ``remat.schedules``.

Layer i (shapes: B rows, width d, hidden width d'):

    h_i     = ReLU(x_i · W1[i] + b1[i])        x_i: [B, d]   W1: [L, d, d']   h_i: [B, d']
    x_{i+1} = h_i · W2[i] + b2[i]              W2: [L, d', d]  x_{i+1}: [B, d]

Loss = ½‖x_L‖² (so dL/dx_L = x_L and gradients are deterministic). Backward of layer i needs x_i and h_i
(ReLU's mask is h_i > 0); it does not need x_{i+1}. Everything is plain numpy, so a recomputed activation is
bitwise the original and every schedule's gradients must equal the plain backward's exactly.

Run it:
    from remat import chain, schedules
    net = chain.make_chain(layers=16, width=8); x = chain.make_input(net, batch=4)
    result = chain.run(net, x, schedules.segments(16, 4))   # result.grads, .peak_bytes, .forwards
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from remat.errors import UsageError
from remat.formulas.chen import check_count
from remat.schedules import Backward, Forward, Loss, Schedule

PARAMS = ("W1", "b1", "W2", "b2")


class ScheduleError(RuntimeError):
    """A schedule asked for an activation that is not stored, stored one twice, left one behind, or did not
    back-propagate every layer in order. A bug in the schedule, not bad user input."""


@dataclass(frozen=True)
class Chain:
    """Parameters of an L-layer chain, stacked per layer: W1 [L, d, d'], b1 [L, d'], W2 [L, d', d], b2 [L, d]."""

    W1: np.ndarray
    b1: np.ndarray
    W2: np.ndarray
    b2: np.ndarray

    @property
    def layers(self) -> int:
        return self.W1.shape[0]

    @property
    def width(self) -> int:
        return self.W1.shape[1]

    @property
    def hidden(self) -> int:
        return self.W1.shape[2]

    @property
    def dtype(self) -> np.dtype:
        return self.W1.dtype


def make_chain(layers: int, width: int, hidden: int | None = None, dtype: str = "float32",
               seed: int = 0) -> Chain:
    """A random chain; W1 ~ N(0, 2/d) (He, for the ReLU), W2 ~ N(0, 1/d'), biases ~ N(0, 0.1²), so that
    activations keep their scale with depth in expectation. ``hidden`` defaults to ``width``.

    Raises UsageError("layers"/"width"/"hidden"/"dtype") for sizes < 1 or a dtype that is not a float.
    """
    hidden = width if hidden is None else hidden
    for name, value in (("layers", layers), ("width", width), ("hidden", hidden)):
        check_count(value, name)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise UsageError("dtype", f"unknown dtype {dtype!r}") from None
    if dt.kind != "f":
        raise UsageError("dtype", f"must be a float dtype (float32, float64), got {dtype!r}")
    rng = np.random.default_rng(seed)
    return Chain(
        W1=(rng.standard_normal((layers, width, hidden)) * np.sqrt(2.0 / width)).astype(dt),
        b1=(rng.standard_normal((layers, hidden)) * 0.1).astype(dt),
        W2=(rng.standard_normal((layers, hidden, width)) * np.sqrt(1.0 / hidden)).astype(dt),
        b2=(rng.standard_normal((layers, width)) * 0.1).astype(dt),
    )


def make_input(chain: Chain, batch: int, seed: int = 1) -> np.ndarray:
    """A random input x_0 of shape [batch, d] in the chain's dtype. Raises UsageError("batch") if batch < 1."""
    check_count(batch, "batch")
    return np.random.default_rng(seed).standard_normal((batch, chain.width)).astype(chain.dtype)


@dataclass
class Gradients:
    """dL/dW1, dL/db1, dL/dW2, dL/db2 (the parameters' shapes) and dL/dx_0 ([B, d])."""

    W1: np.ndarray
    b1: np.ndarray
    W2: np.ndarray
    b2: np.ndarray
    x: np.ndarray | None = None

    @classmethod
    def zeros_like(cls, chain: Chain) -> "Gradients":
        return cls(*(np.zeros_like(getattr(chain, p)) for p in PARAMS))

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in (*PARAMS, "x")}

    def bitwise_equal(self, other: "Gradients") -> bool:
        """True iff every gradient array is np.array_equal to ``other``'s."""
        return all(np.array_equal(a, b) for a, b in zip(self.arrays().values(), other.arrays().values()))

    def max_abs_diff(self, other: "Gradients") -> float:
        """max |self − other| over all gradient arrays (same units as the gradients)."""
        return max(float(np.max(np.abs(a - b))) for a, b in zip(self.arrays().values(),
                                                                other.arrays().values()))


# --- one layer -------------------------------------------------------------------------------------------------

def layer_hidden(chain: Chain, i: int, x: np.ndarray) -> np.ndarray:
    """h_i = ReLU(x_i·W1[i] + b1[i]), [B, d] -> [B, d'] (a new array)."""
    z = x @ chain.W1[i]
    z += chain.b1[i]
    return np.maximum(z, 0, out=z)


def layer_output(chain: Chain, i: int, h: np.ndarray) -> np.ndarray:
    """x_{i+1} = h_i·W2[i] + b2[i], [B, d'] -> [B, d] (a new array)."""
    y = h @ chain.W2[i]
    y += chain.b2[i]
    return y


def layer_backward(chain: Chain, i: int, x: np.ndarray, h: np.ndarray, g: np.ndarray,
                   grads: Gradients) -> np.ndarray:
    """Back-propagate layer i: from g = dL/dx_{i+1} [B, d], write layer i's parameter gradients into
    ``grads`` and return dL/dx_i [B, d]. Needs x_i [B, d] and h_i [B, d'] (ReLU mask = h_i > 0)."""
    grads.W2[i] = h.T @ g
    grads.b2[i] = g.sum(axis=0)
    dh = g @ chain.W2[i].T
    dh *= h > 0
    grads.W1[i] = x.T @ dh
    grads.b1[i] = dh.sum(axis=0)
    return dh @ chain.W1[i].T


def loss_value(y: np.ndarray) -> float:
    """L = ½‖y‖² (y = x_L); its gradient is y itself."""
    return 0.5 * float(np.vdot(y, y))


# --- plain forward / backward (the reference) ------------------------------------------------------------------

def forward(chain: Chain, x: np.ndarray) -> np.ndarray:
    """x_L for input x_0 [B, d], keeping nothing (for finite differences)."""
    for i in range(chain.layers):
        x = layer_output(chain, i, layer_hidden(chain, i, x))
    return x


def naive_grads(chain: Chain, x: np.ndarray) -> tuple[float, Gradients]:
    """The plain backward: keep x_0..x_L and h_0..h_{L−1}, then back-propagate. Returns (loss, gradients)."""
    xs, hs = [x], []
    for i in range(chain.layers):
        hs.append(layer_hidden(chain, i, xs[-1]))
        xs.append(layer_output(chain, i, hs[-1]))
    loss, g = loss_value(xs[-1]), xs[-1]
    grads = Gradients.zeros_like(chain)
    for i in reversed(range(chain.layers)):
        g = layer_backward(chain, i, xs[i], hs[i], g, grads)
    grads.x = g
    return loss, grads


def finite_differences(chain: Chain, x: np.ndarray, probes: int = 3, eps: float = 1e-6,
                       seed: int = 0) -> list[tuple[str, int, float]]:
    """Central differences (L(θ + ε) − L(θ − ε)) / 2ε of the loss at ``probes`` random entries of each of W1,
    b1, W2, b2 and x_0. Returns [(array name, flat index, dL/dθ)]. Needs a float64 chain (UsageError("dtype")
    otherwise: in float32 the difference quotient keeps no digits at ε = 1e-6).
    """
    if chain.dtype != np.float64:
        raise UsageError("dtype", f"finite differences need float64, got {chain.dtype}")
    rng = np.random.default_rng(seed)
    inputs = {**{p: getattr(chain, p).copy() for p in PARAMS}, "x": x.copy()}
    perturbed = Chain(**{p: inputs[p] for p in PARAMS})
    found = []
    for name, array in inputs.items():
        flat = array.reshape(-1)  # a view: writing it perturbs ``perturbed`` / inputs["x"]
        for idx in rng.choice(flat.size, size=min(probes, flat.size), replace=False):
            saved, losses = flat[idx], []
            for step in (eps, -eps):
                flat[idx] = saved + step
                losses.append(loss_value(forward(perturbed, inputs["x"])))
            flat[idx] = saved
            found.append((name, int(idx), (losses[0] - losses[1]) / (2 * eps)))
    return found


def fd_relative_error(grads: Gradients, fd: list[tuple[str, int, float]]) -> float:
    """‖fd − g‖₂ / max(‖fd‖₂, ‖g‖₂) over the probed entries of ``finite_differences`` (dimensionless)."""
    numeric = np.array([value for _, _, value in fd])
    analytic = np.array([getattr(grads, name).reshape(-1)[i] for name, i, _ in fd])
    scale = max(np.linalg.norm(numeric), np.linalg.norm(analytic), np.finfo(np.float64).tiny)
    return float(np.linalg.norm(numeric - analytic) / scale)


# --- the instrumented store and the executor -------------------------------------------------------------------

@dataclass
class ActivationStore:
    """Holds the activations a schedule keeps, keyed ("x", i) or ("h", i); counts what it holds.

    ``live_bytes`` is the sum of ``.nbytes`` of the arrays held now, ``peak_bytes`` its maximum over the run,
    ``forwards`` the layer-forward evaluations the executor reported. Storing a key twice, or reading/freeing
    a missing one, raises ScheduleError.
    """

    arrays: dict = field(default_factory=dict)
    live_bytes: int = 0
    peak_bytes: int = 0
    forwards: int = 0

    def put(self, key: tuple, array: np.ndarray) -> None:
        if key in self.arrays:
            raise ScheduleError(f"{key} stored twice")
        self.arrays[key] = array
        self.live_bytes += array.nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def get(self, key: tuple) -> np.ndarray:
        try:
            return self.arrays[key]
        except KeyError:
            raise ScheduleError(f"{key} is not stored") from None

    def free(self, key: tuple) -> None:
        self.live_bytes -= self.get(key).nbytes
        del self.arrays[key]

    def count_forward(self) -> None:
        self.forwards += 1


@dataclass
class RunResult:
    """What one run of a schedule gives: loss, gradients, and the store's counts (bytes, evaluations)."""

    loss: float
    grads: Gradients
    peak_bytes: int
    forwards: int


def _forward(chain: Chain, store: ActivationStore, op: Forward) -> None:
    i = op.layer
    h = layer_hidden(chain, i, store.get(("x", i)))
    store.put(("h", i), h)
    if not op.keep_input:
        store.free(("x", i))
    store.put(("x", i + 1), layer_output(chain, i, h))
    store.count_forward()
    if not op.keep_hidden:
        store.free(("h", i))
    if not op.keep_output:
        store.free(("x", i + 1))


def run(chain: Chain, x: np.ndarray, schedule: Schedule) -> RunResult:
    """Execute ``schedule`` on ``chain`` for input x_0 [B, d] through an ActivationStore.

    x_0 is stored first (it is segment 0's input / Revolve's initial slot). Ops: Forward(i, keep_input,
    keep_hidden, keep_output) evaluates layer i (h_i stored, then x_i dropped if not kept, then x_{i+1}
    stored, then h_i / x_{i+1} dropped if not kept); Loss takes ½‖x_L‖², seeds g = x_L and drops x_L;
    Backward(i) back-propagates layer i (layers strictly in order L−1..0) and drops x_i and h_i.
    Returns RunResult with the store's peak bytes and forward count. Raises ScheduleError (naming the op)
    for an invalid schedule, a leak, or a layer left without gradient.
    """
    if schedule.layers != chain.layers:
        raise ScheduleError(f"{schedule.name} is for {schedule.layers} layers, chain has {chain.layers}")
    store, grads = ActivationStore(), Gradients.zeros_like(chain)
    store.put(("x", 0), x)
    g, loss, pending = None, None, chain.layers - 1
    for n, op in enumerate(schedule.ops):
        try:
            kind = type(op)
            if kind is Forward:
                _forward(chain, store, op)
            elif kind is Backward:
                if g is None or op.layer != pending:
                    raise ScheduleError(f"backward of layer {op.layer} out of order (expected {pending})")
                g = layer_backward(chain, op.layer, store.get(("x", op.layer)), store.get(("h", op.layer)),
                                   g, grads)
                store.free(("h", op.layer))
                store.free(("x", op.layer))
                pending -= 1
            elif kind is Loss:
                g = store.get(("x", chain.layers))
                loss = loss_value(g)
                store.free(("x", chain.layers))
            else:
                raise ScheduleError(f"unknown op {op!r}")
        except ScheduleError as exc:
            raise ScheduleError(f"{schedule.name}: op {n} {op}: {exc}") from None
    if pending != -1:
        raise ScheduleError(f"{schedule.name}: layers 0..{pending} never back-propagated")
    if store.arrays:
        raise ScheduleError(f"{schedule.name}: left in the store: {sorted(store.arrays)}")
    grads.x = g
    return RunResult(loss=loss, grads=grads, peak_bytes=store.peak_bytes, forwards=store.forwards)
