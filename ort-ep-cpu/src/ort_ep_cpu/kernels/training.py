"""ai.onnx.preview.training: Adagrad, Adam, Momentum (several tensors per node) and Gradient
(reverse-mode differentiation of the forward subgraph for elementwise ops and MatMul)."""

from __future__ import annotations

import numpy as np

from ..registry import kernel

DOMAIN = "ai.onnx.preview.training"


def _groups(data: tuple, per: int) -> list[tuple]:
    """(R, T, x1..xn, g1..gn, ...) -> [(x_i, g_i, ...)] for ``per`` tensors per variable."""
    n = (len(data) - 2) // per
    if n * per + 2 != len(data):
        raise ValueError(f"expected 2 + {per}*n inputs, got {len(data)}")
    return [tuple(data[2 + k * n + i] for k in range(per)) for i in range(n)]


@kernel("Adagrad", since=1, domain=DOMAIN)
def _adagrad(node, request):
    decay = float(node.attr("decay_factor", 0.0))
    eps = float(node.attr("epsilon", 1e-6))
    norm = float(node.attr("norm_coefficient", 0.0))

    def adagrad(r, t, *data):
        rate = r / (1 + t * decay)
        xs, hs = [], []
        for x, g, h in _groups((r, t, *data), 3):
            g = norm * x + g
            h_new = h + g * g
            xs.append((x - rate * g / (np.sqrt(h_new) + eps)).astype(x.dtype))
            hs.append(h_new.astype(h.dtype))
        return xs + hs

    return adagrad


@kernel("Adam", since=1, domain=DOMAIN)
def _adam(node, request):
    alpha = float(node.attr("alpha", 0.9))
    beta = float(node.attr("beta", 0.999))
    eps = float(node.attr("epsilon", 1e-6))
    norm = float(node.attr("norm_coefficient", 0.0))
    norm_post = float(node.attr("norm_coefficient_post", 0.0))

    def adam(r, t, *data):
        # bias correction of both momentums from the second step on
        rate = r * np.sqrt(1 - beta**t) / (1 - alpha**t) if t > 0 else r
        xs, vs, hs = [], [], []
        for x, g, v, h in _groups((r, t, *data), 4):
            g = norm * x + g
            v_new = alpha * v + (1 - alpha) * g
            h_new = beta * h + (1 - beta) * g * g
            x_new = (1 - norm_post) * (x - rate * v_new / (np.sqrt(h_new) + eps))
            xs.append(x_new.astype(x.dtype))
            vs.append(v_new.astype(v.dtype))
            hs.append(h_new.astype(h.dtype))
        return xs + vs + hs

    return adam


@kernel("Momentum", since=1, domain=DOMAIN)
def _momentum(node, request):
    alpha = float(node.attr("alpha"))
    beta = float(node.attr("beta"))
    norm = float(node.attr("norm_coefficient"))
    mode = node.attr("mode", "standard")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in ("standard", "nesterov"):
        raise ValueError(f"Momentum {node.name!r}: mode {mode!r} is not 'standard' or 'nesterov'")

    def momentum(r, t, *data):
        b = beta if t > 0 else 1.0  # the first step takes the whole gradient
        xs, vs = [], []
        for x, g, v in _groups((r, t, *data), 3):
            g = norm * x + g
            v_new = alpha * v + b * g
            step = g + alpha * v_new if mode == "nesterov" else v_new
            xs.append((x - r * step).astype(x.dtype))
            vs.append(v_new.astype(v.dtype))
        return xs + vs

    return momentum


# --------------------------------------------------------------------------------------------
# Gradient
# --------------------------------------------------------------------------------------------


def _unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` over the axes broadcasting added to reach ``shape``."""
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    for axis, n in enumerate(shape):
        if n == 1 and grad.shape[axis] != 1:
            grad = grad.sum(axis=axis, keepdims=True)
    return grad


_FORWARD = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Neg": np.negative,
    "Identity": lambda x: x, "Relu": lambda x: np.maximum(x, 0), "Exp": np.exp, "Log": np.log,
    "Tanh": np.tanh, "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "MatMul": np.matmul,
}


def _backward(op: str, ins: list[np.ndarray], out: np.ndarray, g: np.ndarray) -> list[np.ndarray]:
    """Gradients of the inputs of one node given the gradient ``g`` of its output."""
    if op == "Add":
        return [g, g]
    if op == "Sub":
        return [g, -g]
    if op == "Mul":
        return [g * ins[1], g * ins[0]]
    if op == "Div":
        return [g / ins[1], -g * ins[0] / (ins[1] * ins[1])]
    if op == "Neg":
        return [-g]
    if op == "Identity":
        return [g]
    if op == "Relu":
        return [g * (ins[0] > 0)]
    if op == "Exp":
        return [g * out]
    if op == "Log":
        return [g / ins[0]]
    if op == "Tanh":
        return [g * (1 - out * out)]
    if op == "Sigmoid":
        return [g * out * (1 - out)]
    if op == "MatMul":
        a, b = ins
        return [g @ np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2) @ g]
    raise NotImplementedError(op)


@kernel("Gradient", since=1, domain=DOMAIN)
def _gradient(node, request):
    xs = [s.decode() if isinstance(s, bytes) else s for s in node.attr("xs")]
    zs = [s.decode() if isinstance(s, bytes) else s for s in (node.attr("zs") or [])]
    y = node.attr("y")
    y = y.decode() if isinstance(y, bytes) else y
    graph = request.graph
    known = set(xs) | set(zs)
    # the nodes between the inputs and y, in graph (topological) order
    needed: set[int] = set()
    stack = [y]
    while stack:
        name = stack.pop()
        if name in known or not name:
            continue
        producer = graph.producer.get(name)
        if producer is None:
            if graph.defines(name) and graph.value(name).const_value is not None:
                continue
            raise ValueError(f"Gradient {node.name!r}: {name!r} is neither in xs/zs nor computed from them")
        if producer not in needed:
            needed.add(producer)
            stack.extend(graph.nodes[producer].inputs)
    steps = [graph.nodes[i] for i in sorted(needed)]
    for step in steps:
        if step.domain or step.op_type not in _FORWARD:
            raise NotImplementedError(
                f"Gradient {node.name!r}: cannot differentiate {step.qualified_op} (differentiable ops: "
                f"{', '.join(sorted(_FORWARD))})"
            )
    constants = {n: graph.value(n).const_value for s in steps for n in s.inputs
                 if n and n not in known and graph.producer.get(n) is None}
    inputs = xs + zs

    def gradient(*values):
        env = dict(constants)
        env.update(zip(inputs, values))
        for s in steps:
            env[s.outputs[0]] = np.asarray(_FORWARD[s.op_type](*[env[n] for n in s.inputs]))
        grads = {y: np.ones_like(env[y])}
        for s in reversed(steps):
            g = grads.get(s.outputs[0])
            if g is None:
                continue
            args = [env[n] for n in s.inputs]
            for name, arg, dg in zip(s.inputs, args, _backward(s.op_type, args, env[s.outputs[0]], g)):
                dg = _unbroadcast(np.asarray(dg), arg.shape).astype(arg.dtype, copy=False)
                grads[name] = grads[name] + dg if name in grads else dg
        return [grads.get(x, np.zeros_like(env[x])) for x in xs]

    return gradient
