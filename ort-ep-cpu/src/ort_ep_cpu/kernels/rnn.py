"""Recurrent ops: RNN, GRU, LSTM (all directions, both layouts, custom activations, clip,
sequence_lens, peepholes). The input projection of every time step is one GEMM; only the
recurrence loops over time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._lazy import special  # scipy.special, imported at first use
from ..registry import kernel
from . import _jit, _onednn
from ._util import SHAPE_CACHE_MAX, PreparedFor, const_input
from .nn import COMPILED_PRODUCT_ROWS, ROW_SPLIT_MACS, _constant_product, _row_product, pack_float_panels


def _sigmoid(x, alpha, beta):
    # scipy's expit: no overflow (and no warning) for large negative x, same values
    return special.expit(x)


def _softplus(x, alpha, beta):
    return np.logaddexp(0, x)


# name -> (function(x, alpha, beta), number of alpha/beta values it consumes, default alpha, beta)
_ACTIVATIONS = {
    "relu": (lambda x, a, b: np.maximum(x, 0), 0, None, None),
    "tanh": (lambda x, a, b: np.tanh(x), 0, None, None),
    "sigmoid": (_sigmoid, 0, None, None),
    "affine": (lambda x, a, b: a * x + b, 2, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 1, 0.01, None),
    "thresholdedrelu": (lambda x, a, b: np.where(x > a, x, 0), 1, 1.0, None),
    "scaledtanh": (lambda x, a, b: a * np.tanh(b * x), 2, 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 2, 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1)), 1, 1.0, None),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), 0, None, None),
    "softplus": (_softplus, 0, None, None),
}


def _names(node, defaults: list[str], n_dirs: int) -> list[str]:
    """The node's activations' names as given (the defaults for every direction where none are)."""
    names = node.attr("activations")
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names] if names else defaults * n_dirs


def _per_direction(items: list, per_dir: int, n_dirs: int) -> list[list]:
    """``items`` split into each direction's ``per_dir`` (a single direction's serves both)."""
    if len(items) == per_dir and n_dirs == 2:
        items = items * 2
    return [items[d * per_dir : (d + 1) * per_dir] for d in range(n_dirs)]


def _activation_names(node, defaults: list[str], n_dirs: int) -> list[list[str]]:
    """The activations' names of each direction."""
    return _per_direction(_names(node, defaults, n_dirs), len(defaults), n_dirs)


def _activations(node, defaults: list[str], n_dirs: int):
    names = _names(node, defaults, n_dirs)
    alphas = list(node.attr("activation_alpha") or [])
    betas = list(node.attr("activation_beta") or [])
    funcs = []
    for name in names:
        key = name.lower()
        if key not in _ACTIVATIONS:
            raise ValueError(f"{node.op_type} {node.name!r}: activation {name!r}; valid values: {sorted(_ACTIVATIONS)}")
        fn, n_params, da, db = _ACTIVATIONS[key]
        a = alphas.pop(0) if n_params >= 1 and alphas else da
        b = betas.pop(0) if n_params >= 2 and betas else db
        funcs.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    return _per_direction(funcs, len(defaults), n_dirs)


def _reverse_in_length(x: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Reverse the first lens[b] steps of each batch entry of x (seq, batch, ...)."""
    t = np.arange(x.shape[0])[:, None]
    src = np.where(t < lens[None, :], lens[None, :] - 1 - t, t)
    return x[src, np.arange(x.shape[1])[None, :]]


def _default_activations(node, defaults: list[str]) -> bool:
    """Whether ``node`` uses its op's default activations (the compiled recurrences' only ones)."""
    names = _names(node, defaults, 1)
    per_dir = [n.lower() for n in defaults]
    return [n.lower() for n in names] in (per_dir, per_dir * 2)


class _Recurrent:
    """Shared plumbing: layout, directions, sequence_lens, initial states, outputs."""

    gates = 1
    defaults = ["Tanh"]
    has_cell = False

    def __init__(self, node, constant_weights: bool = False):
        self.node = node
        # W and R initializers: the oneDNN primitive packs them once (weights fed at run time
        # would make a primitive every run)
        self._constant_weights = constant_weights
        direction = node.attr("direction", "forward")
        self.direction = direction.decode() if isinstance(direction, bytes) else str(direction)
        valid = ("forward", "reverse", "bidirectional")
        if self.direction not in valid:
            raise ValueError(f"{node.op_type} {node.name!r}: attribute direction={self.direction!r}; valid values: {list(valid)}")
        self.n_dirs = 2 if self.direction == "bidirectional" else 1
        self.layout = int(node.attr("layout", 0))
        self.clip = node.attr("clip")
        self.acts = _activations(node, self.defaults, self.n_dirs)
        self.n_out = len(node.outputs)
        # R transposed to a contiguous (hidden, G*hidden) per direction (transposing it each
        # run cost about 0.17 ms of silero-vad's 0.8 ms); W transposed likewise, with its oneDNN
        # product (``nn._ConstantProduct``: packed once, on the session's threads) where it
        # takes one, for the input projection of every step; the single step's [W; R]
        self._prepared = PreparedFor()
        # input shape signatures already checked by _check_shapes (a check is ~5 us a run)
        self._checked: set[tuple] = set()
        # the oneDNN cell (``_onednn.Recurrence``'s) that computes this node where its weights
        # are constants, every sequence is whole and the arrays float32, or None (subclasses
        # set it)
        self._onednn_cell: str | None = None
        # (seq, batch) shapes run once: a shape's first run takes the compiled scan and its
        # second makes the primitive (a stream of ever new lengths, as a speech model's,
        # would make one every run: 2.5-20 ms each at hidden 512)
        self._seen_shapes: set[tuple[int, int]] = set()

    def _recurrence_weights(self, r: np.ndarray) -> list[np.ndarray]:
        return self._prepared.get("R", (r,), lambda: [np.ascontiguousarray(r[d].T) for d in range(r.shape[0])])

    def _input_weights(self, w: np.ndarray) -> list[tuple[np.ndarray, object]]:
        def make():
            transposed = [np.ascontiguousarray(w[d].T) for d in range(w.shape[0])]
            return [(wt, _constant_product(wt)) for wt in transposed]
        return self._prepared.get("W", (w,), make)

    def _remember_checked(self, signature: tuple) -> None:
        """``signature`` passed ``_check_shapes``; past ``SHAPE_CACHE_MAX`` signatures the set
        starts over (a stream of ever new lengths would grow it without end)."""
        if len(self._checked) >= SHAPE_CACHE_MAX:
            self._checked.clear()
        self._checked.add(signature)

    def _check_shapes(self, x, w, r, b, lens, h0, c0, p):
        """numpy would broadcast some mismatches silently; name the offending input instead."""
        seq, batch, inp = x.shape
        hidden = int(self.node.attr("hidden_size", r.shape[-1]))
        g = self.gates * hidden
        expected = {
            "W": (w, (self.n_dirs, g, inp)),
            "R": (r, (self.n_dirs, g, hidden)),
            "B": (b, (self.n_dirs, 2 * g)),
            "sequence_lens": (lens, (batch,)),
            "initial_h": (h0, (self.n_dirs, batch, hidden)),
            "initial_c": (c0, (self.n_dirs, batch, hidden)),
            "P": (p, (self.n_dirs, 3 * hidden)),
        }
        for name, (value, shape) in expected.items():
            if value is not None and tuple(value.shape) != shape:
                layout = " (before the layout=1 transpose)" if self.layout == 1 and name.startswith("initial") else ""
                raise ValueError(
                    f"{self.node.op_type} {self.node.name!r}: input {name} has shape {tuple(value.shape)}, "
                    f"expected {shape}{layout} for X {tuple(x.shape)}, hidden_size {hidden}, direction {self.direction!r}"
                )

    def _pre(self, z):
        return z if self.clip is None else np.clip(z, -self.clip, self.clip)

    def __call__(self, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None):
        if self.layout == 1:
            x = x.transpose(1, 0, 2)
            initial_h = None if initial_h is None else initial_h.transpose(1, 0, 2)
            initial_c = None if initial_c is None else initial_c.transpose(1, 0, 2)
        seq, batch, _ = x.shape
        hidden = r.shape[-1]
        signature = (x.shape, w.shape, r.shape, *(None if v is None else v.shape
                                                   for v in (b, sequence_lens, initial_h, initial_c, p)))
        if signature not in self._checked:
            self._check_shapes(x, w, r, b, sequence_lens, initial_h, initial_c, p)
            self._remember_checked(signature)
        if sequence_lens is None:  # every row the whole sequence: nothing to check
            lens, full = np.full(batch, seq, np.int64), True
        else:
            lens = sequence_lens.astype(np.int64)
            full = bool((lens == seq).all())
        if full and self._onednn_cell is not None and self._constant_weights:
            outs = self._by_onednn(x, w, r, b, initial_h, initial_c, p)
            if outs is not None:
                return outs
        rts = self._recurrence_weights(r)
        weights = self._input_weights(w)
        # the outputs made whole and filled per direction (np.stack's three calls took about
        # 40 us of a small bidirectional LSTM's 200)
        y = y_h = y_c = None
        for d in range(self.n_dirs):
            reverse = self.direction == "reverse" or d == 1
            xd = _reverse_in_length(x, lens) if reverse and not full else (x[::-1] if reverse else x)
            g = self.gates * hidden
            bias = np.zeros(2 * g, x.dtype) if b is None else b[d]
            # input projection for all steps at once, as one 2-D GEMM (numpy's stacked matmul
            # with a broadcast 2-D operand skips BLAS): (seq, batch, G*hidden)
            wt, product = weights[d]
            rows = np.ascontiguousarray(xd.reshape(seq * batch, x.shape[2]))  # (-1: not for no rows)
            xw = product(rows) if product is not None else None
            if xw is None:  # no oneDNN, or a product small enough for numpy's call
                xw = rows @ wt
            xw = xw.reshape(seq, batch, g)
            xw += bias[:g]
            h0 = np.zeros((batch, hidden), x.dtype) if initial_h is None else initial_h[d]
            c0 = np.zeros((batch, hidden), x.dtype) if initial_c is None else initial_c[d]
            pd = None if p is None else p[d]
            yd, h, c = self._scan(xw, rts[d], bias[g:], h0, c0, pd, self.acts[d], lens, full)
            if reverse:
                yd = _reverse_in_length(yd, lens) if not full else yd[::-1]
            if y is None:
                y = np.empty((seq, self.n_dirs) + yd.shape[1:], yd.dtype)  # (seq, dirs, batch, hidden)
                y_h = np.empty((self.n_dirs,) + h.shape, h.dtype)
                y_c = np.empty((self.n_dirs,) + c.shape, c.dtype)
            y[:, d] = yd
            y_h[d] = h
            y_c[d] = c
        return self._outputs(y, y_h, y_c)

    def _outputs(self, y, y_h, y_c):
        """The node's outputs from Y (seq, dirs, batch, hidden) and the last states (dirs,
        batch, hidden), in its layout."""
        if self.layout == 1:
            y = y.transpose(2, 0, 1, 3)
            y_h = y_h.transpose(1, 0, 2)
            y_c = None if y_c is None else y_c.transpose(1, 0, 2)
        outs = (y, y_h, y_c) if self.has_cell else (y, y_h)
        return outs[0] if self.n_out == 1 else outs[: self.n_out]

    def _by_onednn(self, x, w, r, b, h0, c0, p):
        """The outputs by oneDNN's primitive for the whole sequence (x seq-major), or None where
        it does not take these arrays (not float32, no oneDNN, a cell it declines); None in a
        process forked after oneDNN was loaded (``_onednn.plan_for`` hands out no plan there)."""
        arrays = (x, w, r, b, h0, c0, p)
        if any(a is not None and a.dtype != np.float32 for a in arrays):
            return None
        seq, batch, _ = x.shape
        dirs, hidden = self.n_dirs, r.shape[-1]
        if seq == 0 or batch == 0 or hidden == 0:
            return None
        # the primitives of these weights by (seq, batch), and the weights in oneDNN's layouts
        # for all of them; made anew for weights fed anew
        plans, packed = self._prepared.get("onednn", (w, r, b, p), lambda: ({}, _onednn.PackedConstants()))
        if (seq, batch) not in plans and (seq, batch) not in self._seen_shapes:
            if len(self._seen_shapes) >= SHAPE_CACHE_MAX:
                self._seen_shapes.clear()
            self._seen_shapes.add((seq, batch))
            return None
        x_shape = x.shape  # (the maker is kept with the plan: not this run's array)
        plan = _onednn.plan_for(plans, (seq, batch), lambda lib: _onednn.Recurrence(
            lib, self._onednn_cell, self.direction, x_shape, w, r, b, p, packed))
        if plan is None:
            return None
        state = (dirs, batch, hidden)
        h0 = np.zeros(state, np.float32) if h0 is None else np.ascontiguousarray(h0)
        y = np.empty((seq, batch, dirs * hidden), np.float32)
        y_h = np.empty(state, np.float32)
        if self.has_cell:
            c0 = np.zeros(state, np.float32) if c0 is None else np.ascontiguousarray(c0)
            y_c = np.empty(state, np.float32)
        else:
            c0 = y_c = None
        plan.run(np.ascontiguousarray(x), h0, c0, y, y_h, y_c)
        # (seq, batch, dirs * hidden) -> (seq, dirs, batch, hidden): a view for one direction
        y = y.reshape(seq, batch, dirs, hidden).transpose(0, 2, 1, 3)
        return self._outputs(y if dirs == 1 else np.ascontiguousarray(y), y_h, y_c)

    def _scan(self, xw, rt, rb, h, c, p, acts, lens, full):
        seq = xw.shape[0]
        ys = np.zeros((seq,) + h.shape, h.dtype)
        for t in range(seq):
            h_new, c_new = self.step(xw[t], h, c, rt, rb, p, acts)
            if full:
                h, c = h_new, c_new
            else:
                # finished sequences keep their last state; their outputs stay 0
                alive = (t < lens)[:, None]
                h, c = np.where(alive, h_new, h), np.where(alive, c_new, c)
                h_new = np.where(alive, h_new, 0)
            ys[t] = h_new
        return ys, h, c


class _RNN(_Recurrent):
    def __init__(self, node, constant_weights: bool = False):
        super().__init__(node, constant_weights)
        # the compiled recurrence (_jit.rnn_scan) for float32 where each direction's activation
        # is one it computes (Tanh, Relu, Sigmoid) and there is no clip: the Python step loop
        # took about 2 us a step (a bidirectional onset detector's six RNNs of 300 steps: 6.3 ms
        # where onnxruntime takes 1.1)
        names = _activation_names(node, self.defaults, self.n_dirs)
        codes = [_jit.RNN_ACTIVATIONS.get(names[d][0].lower()) for d in range(self.n_dirs)]
        self._codes = codes if self.clip is None and None not in codes and _jit.enabled() else None

    def _scan(self, xw, rt, rb, h, c, p, acts, lens, full):
        scan = _jit.rnn_scan() if self._codes is not None and xw.dtype == np.float32 else None
        if scan is None:
            return super()._scan(xw, rt, rb, h, c, p, acts, lens, full)
        code = self._codes[[mine is acts for mine in self.acts].index(True)]  # this direction's
        h = np.array(h, np.float32)  # the state, updated in place
        ys = np.empty(xw.shape[:2] + h.shape[1:], np.float32)
        scan(np.ascontiguousarray(xw), rt, np.ascontiguousarray(rb, np.float32), code, lens, h, ys)
        return ys, h, c

    def step(self, xw, h, c, rt, rb, p, acts):
        return acts[0](self._pre(xw + h @ rt + rb)), c


class _GRU(_Recurrent):
    gates = 3
    defaults = ["Sigmoid", "Tanh"]

    def __init__(self, node, constant_weights: bool = False):
        super().__init__(node, constant_weights)
        self.lbr = bool(node.attr("linear_before_reset", 0))
        plain = self.clip is None and _default_activations(node, self.defaults)
        if plain:
            self._onednn_cell = _onednn.LINEAR_BEFORE_RESET_GRU if self.lbr else _onednn.GRU
        # the compiled recurrence (_jit.gru_scan) for float32 with the default activations
        self._compiled = plain and _jit.enabled()

    def _scan(self, xw, rt, rb, h, c, p, acts, lens, full):
        scan = _jit.gru_scan() if self._compiled and xw.dtype == np.float32 else None
        if scan is None:
            return super()._scan(xw, rt, rb, h, c, p, acts, lens, full)
        h = np.array(h, np.float32)  # the state, updated in place
        ys = np.empty(xw.shape[:2] + h.shape[1:], np.float32)
        scan(np.ascontiguousarray(xw), rt, np.ascontiguousarray(rb, np.float32), self.lbr, lens, h, ys)
        return ys, h, c

    def step(self, xw, h, c, rt, rb, p, acts):
        f, g = acts
        n = h.shape[1]
        hr = h @ rt[:, : 2 * n] + rb[: 2 * n]
        z = f(self._pre(xw[:, :n] + hr[:, :n]))
        r = f(self._pre(xw[:, n : 2 * n] + hr[:, n:]))
        if self.lbr:
            cand = xw[:, 2 * n :] + r * (h @ rt[:, 2 * n :] + rb[2 * n :])
        else:
            cand = xw[:, 2 * n :] + (r * h) @ rt[:, 2 * n :] + rb[2 * n :]
        ht = g(self._pre(cand))
        return (1 - z) * ht + z * h, c


_NO_PEEPHOLES = np.empty(0, np.float32)
#: batch rows from which an LSTM's recurrence takes R in packed panels (``_jit.lstm_panel_scan``)
PANEL_SCAN_ROWS = 3


class _LSTM(_Recurrent):
    gates = 4
    defaults = ["Sigmoid", "Tanh", "Tanh"]
    has_cell = True

    def __init__(self, node, constant_weights: bool = False):
        super().__init__(node, constant_weights)
        self.input_forget = bool(node.attr("input_forget", 0))
        plain = self.clip is None and not self.input_forget and _default_activations(node, self.defaults)
        if plain:
            self._onednn_cell = _onednn.LSTM
        # one direction of plain gates: a single time step (streaming models such as silero-vad
        # call LSTM once per 32 ms chunk) is one GEMM of [x, h] by [W; R] made once
        self._single_ok = plain and self.n_dirs == 1 and self.layout == 0
        # plain gates: the compiled recurrence (_jit.lstm_scan) for float32
        self._compiled = plain and _jit.enabled()
        self._panels: dict[tuple, tuple] = {}  # R and rb packed for ``_jit.lstm_panel_scan``

    def __call__(self, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None):
        if self._single_ok and p is None and sequence_lens is None and x.ndim == 3 and x.shape[0] == 1:
            return self._single_step(x, w, r, b, initial_h, initial_c)
        return super().__call__(x, w, r, b, sequence_lens, initial_h, initial_c, p)

    def _scan(self, xw, rt, rb, h, c, p, acts, lens, full):
        scan = _jit.lstm_scan() if self._compiled and xw.dtype == np.float32 else None
        if scan is None:
            return super()._scan(xw, rt, rb, h, c, p, acts, lens, full)
        h, c = np.array(h, np.float32), np.array(c, np.float32)  # the state, updated in place
        ys = np.empty(xw.shape[:2] + h.shape[1:], np.float32)
        peepholes = _NO_PEEPHOLES if p is None else np.ascontiguousarray(p, np.float32)
        panel_scan = _jit.lstm_panel_scan() if xw.shape[1] >= PANEL_SCAN_ROWS else None
        if panel_scan is not None:  # R and rb packed once per R (the rows' register blocks)
            key = (rt.__array_interface__["data"][0], rb.tobytes())
            panels = self._panels.get(key)
            if panels is None:
                if len(self._panels) >= 4:  # (R fed at run time: each new one packed anew)
                    self._panels.clear()
                panels = self._panels[key] = (rt, *pack_float_panels(rt, rb))  # (rt held: its address is the key)
            panel_scan(np.ascontiguousarray(xw), panels[1], panels[2], peepholes, lens, h, c, ys)
            return ys, h, c
        scan(np.ascontiguousarray(xw), rt, np.ascontiguousarray(rb, np.float32), peepholes, lens, h, c, ys)
        return ys, h, c

    def _single_step(self, x, w, r, b, initial_h, initial_c):
        signature = (x.shape, w.shape, r.shape, *(None if v is None else v.shape for v in (b, initial_h, initial_c)))
        if signature not in self._checked:
            self._check_shapes(x, w, r, b, None, initial_h, initial_c, None)
            self._remember_checked(signature)

        def stack():  # [W; R] transposed, W's bias plus R's, and their compiled few-row product
            g = w.shape[1]
            wr = np.ascontiguousarray(np.concatenate((w[0], r[0]), axis=1).T)
            bias = np.zeros(g, wr.dtype) if b is None else (b[0, :g] + b[0, g:]).astype(wr.dtype)
            return wr, bias, _row_product(wr, bias=bias)
        wr, bias, row_product = self._prepared.get("stacked", (w, r, b), stack)
        batch, n = x.shape[1], r.shape[-1]
        h = np.zeros((batch, n), x.dtype) if initial_h is None else initial_h[0]
        c = np.zeros((batch, n), x.dtype) if initial_c is None else initial_c[0]
        step = _jit.lstm_step() if self._compiled and row_product is not None else None
        if (step is not None and x.dtype == h.dtype == c.dtype == np.float32 and batch <= COMPILED_PRODUCT_ROWS
                and batch * wr.size < ROW_SPLIT_MACS):
            # the product on one thread (as the row loops would take it), and the cells, in one
            # compiled call
            return self._compiled_cells(c, lambda c_new, h_row, y_row: step(
                np.ascontiguousarray(x[0]), np.ascontiguousarray(h), wr, bias, _NO_PEEPHOLES, c_new, h_row, y_row))
        xh = np.concatenate((x[0], h), axis=1)
        # gate order i, o, f, c; one or two rows: the product and the bias in one compiled call
        z = None if row_product is None else row_product(xh)
        if z is None:
            z = xh @ wr
            z += bias
        cells = _jit.lstm_cells() if z.dtype == np.float32 and self._compiled else None
        if cells is not None:  # the gate arithmetic below in one compiled call
            return self._compiled_cells(c, lambda c_new, h_row, y_row: cells(
                np.ascontiguousarray(z), _NO_PEEPHOLES, c_new, h_row, y_row))
        iof = special.expit(z[:, : 3 * n])
        c_new = iof[:, 2 * n :] * c
        c_new += iof[:, :n] * np.tanh(z[:, 3 * n :])
        h_new = iof[:, n : 2 * n] * np.tanh(c_new)
        if self.n_out == 1:
            return h_new.reshape(1, 1, batch, n)
        outs = (h_new.reshape(1, 1, batch, n), h_new.reshape(1, batch, n).copy(), c_new.reshape(1, batch, n))
        return outs[: self.n_out]

    def _compiled_cells(self, c: np.ndarray, compute: Callable[[np.ndarray, np.ndarray, np.ndarray], None]) -> Any:
        """The single step's outputs (Y, Y_h, Y_c as many as the node has) where a compiled call
        ``compute(c_new, h_row, y_row)`` updates the cell state c_new (a copy of ``c``: the
        initial state stays as fed) in place and writes the new h into h_row and y_row."""
        batch, n = c.shape
        c_new = np.array(c, np.float32)
        h_new = np.empty((1, batch, n), np.float32)
        y = np.empty((1, 1, batch, n), np.float32)
        compute(c_new, h_new[0], y[0, 0])
        outs = (y, h_new, c_new.reshape(1, batch, n))
        return y if self.n_out == 1 else outs[: self.n_out]

    def step(self, xw, h, c, rt, rb, p, acts):
        f, g, hact = acts
        n = h.shape[1]
        z = xw + h @ rt + rb  # gate order i, o, f, c
        if p is None and not self.input_forget:
            # one activation call over the three sigmoid gates (i, o, f are adjacent)
            iof = f(self._pre(z[:, : 3 * n]))
            i, o, fg = iof[:, :n], iof[:, n : 2 * n], iof[:, 2 * n :]
            c_new = fg * c + i * g(self._pre(z[:, 3 * n :]))
            return o * hact(c_new), c_new
        zi, zo, zf, zc = z[:, :n], z[:, n : 2 * n], z[:, 2 * n : 3 * n], z[:, 3 * n :]
        if p is not None:
            zi = zi + p[:n] * c
            zf = zf + p[2 * n :] * c
        i = f(self._pre(zi))
        fg = 1 - i if self.input_forget else f(self._pre(zf))
        c_new = fg * c + i * g(self._pre(zc))
        if p is not None:
            zo = zo + p[n : 2 * n] * c_new
        o = f(self._pre(zo))
        return o * hact(c_new), c_new


def _builder(cls):
    def build(node, request):
        return cls(node, const_input(node, request, 1) is not None and const_input(node, request, 2) is not None)

    return build


for _since in (1, 7, 14, 22):
    kernel("RNN", since=_since)(_builder(_RNN))
for _since in (1, 3, 7, 14, 22):
    kernel("GRU", since=_since)(_builder(_GRU))
for _since in (1, 7, 14, 22):
    kernel("LSTM", since=_since)(_builder(_LSTM))
