"""The board-tower net's value-only forward for the turn search: each board's tower once.

A turn-search call holds every successor of many turns (about 120 rows a game). All rows of a game
share the board of the player about to roll (``me``: the mover's opponent), and the mover's board
after a mark (``opp``) depends only on the category and, for the upper section, the points — so a
27k-row call holds ~250 distinct ``me`` boards and ~10k distinct ``opp`` boards. Two turns deep
(``depth=2``) a call holds the opponent's successors of each of the mover's ~120 successors: the
same ~45 ``opp`` boards come back for every one of them (one 57,600-row call: 45 of each).
:func:`board_ids_pair` numbers the distinct boards of both kinds in one pass (an equal previous
row first, then a hash table), so each tower runs once per distinct board of the call.

The forward then computes, exactly as
:meth:`~leaguezero.yatzy.net.networks.BoardTowerNet.forward` up to float rounding:

- each tower once per distinct board, and its first head layer's share right away:
  ``A = tower(me_u) @ W1[:, :E]ᵀ`` [U₁, H], ``B = tower(opp_u) @ W1[:, E:2E]ᵀ`` [U₂, H]
  (the head's first layer is linear in the concatenation ``[me, opp, shared]``);
- ``h₁ = relu(b₁ + shared · W1[:, 2E:]ᵀ + A[id_me] + B[id_opp])`` per row in one fused numba
  pass over float32, written straight in the network's dtype (bfloat16 as its upper 16 bits,
  rounded to nearest even like torch) — no column gathers, ``cat`` or separate ReLUs;
- the second head layer, and the value and margin heads as one ``[2, H]`` matmul; the policy
  head, which the turn search does not use (and which is not trained), is not computed.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from numba import njit
from torch import nn

from leaguezero.yatzy.game import turn_features

# No import of the net (it imports this module for its value_forward): the board-tower net
# reads these same columns (game.turn_features), and is typed as a module here.
ME_COLS = np.array(turn_features.ME_BOARD_COLS, np.int64)
OPP_COLS = np.array(turn_features.OPP_BOARD_COLS, np.int64)
SHARED_COLS = np.array(turn_features.SHARED_COLS, np.int64)


_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)
_MIX = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, nogil=True, inline="always")
def _same_board(bits, cols, i, j):
    for c in cols:  # noqa: SIM110 (numba compiles no generator passed to all())
        if bits[i, c] != bits[j, c]:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _board_id(bits, cols, i, ids, starts, table, mask, count):
    """Row ``i``'s board id on ``cols`` (see :func:`board_ids_pair`); returns the new count."""
    if i > 0 and _same_board(bits, cols, i, i - 1):  # most rows repeat the row before
        ids[i] = ids[i - 1]
        return count
    h = _FNV_OFFSET
    for c in cols:
        h = (h ^ np.uint64(bits[i, c])) * _FNV_PRIME
    # FNV's low bits only see the inputs' low bits, and a small float's are zeros (1.0f is
    # 0x3F800000): fold the high half down before the table's mask reads the low bits.
    h ^= h >> np.uint64(32)
    h *= _MIX
    h ^= h >> np.uint64(29)
    slot = np.int64(h & mask)
    while True:
        u = table[slot]
        if u < 0:  # a board not seen in this call
            table[slot] = count
            starts[count] = i
            ids[i] = count
            return count + 1
        if _same_board(bits, cols, i, starts[u]):
            ids[i] = u
            return count
        slot = (slot + 1) & np.int64(mask)


@njit(cache=True, nogil=True)
def board_ids_pair(bits, cols_a, cols_b, ids, starts, table):
    """Number the distinct boards of the rows of ``bits`` on ``cols_a``, and on ``cols_b``.

    ``bits`` uint32 [N, F]: the features' float32 bits (``features.view(np.uint32)``: equal
    bits, equal board); ``cols_a``, ``cols_b`` int64 [C]. Writes ``ids`` int64 [2, >= N] (row ->
    its board, numbered in order of first appearance, per column set) and ``starts`` int64
    [2, >= N] (board -> its first row); ``table`` int64 [2, T] is scratch, T a power of two
    >= 2N. Returns ``(boards on cols_a, boards on cols_b)``.
    """
    n = bits.shape[0]
    size = 1
    while size < 2 * n:
        size *= 2
    table[:, :size] = -1
    mask = np.uint64(size - 1)
    count_a = 0
    count_b = 0
    for i in range(n):
        count_a = _board_id(bits, cols_a, i, ids[0], starts[0], table[0], mask, count_a)
        count_b = _board_id(bits, cols_b, i, ids[1], starts[1], table[1], mask, count_b)
    return count_a, count_b


@njit(cache=True, nogil=True, fastmath=True)
def _first_layer_f32(features, shared_cols, w_shared, bias, a, id_a, b, id_b, out):
    """``out[n] = relu(bias + Σ_k features[n, shared_k] w_shared[k] + a[id_a[n]] + b[id_b[n]])``.

    ``w_shared`` float32 [S, H] (the shared columns' weights, transposed), ``bias`` [H],
    ``a`` [U1, H], ``b`` [U2, H]; ``out`` float32 [N, H].
    """
    hidden = bias.shape[0]
    for n in range(features.shape[0]):
        ra = a[id_a[n]]
        rb = b[id_b[n]]
        row = out[n]
        for h in range(hidden):
            row[h] = bias[h] + ra[h] + rb[h]
        for k in range(shared_cols.shape[0]):
            x = features[n, shared_cols[k]]
            if x != 0.0:
                wk = w_shared[k]
                for h in range(hidden):
                    row[h] += x * wk[h]
        for h in range(hidden):
            if row[h] < 0.0:
                row[h] = 0.0


# The bfloat16 kernel repeats the float32 one's sum on purpose: sharing it through an inlined
# helper measured 0.89 / 0.95 / 1.02x the self-play rate (benchmarks/selfplay_cpu.py, pairs).
@njit(cache=True, nogil=True, fastmath=True)
def _first_layer_bf16(features, shared_cols, w_shared, bias, a, id_a, b, id_b, out, scratch):
    """As :func:`_first_layer_f32`, but ``out`` is uint16 [N, H]: the bfloat16 bits of each value
    (round to nearest even, as ``torch.Tensor.to(torch.bfloat16)``); ``scratch`` float32 [H]."""
    hidden = bias.shape[0]
    bits = scratch.view(np.uint32)
    for n in range(features.shape[0]):
        ra = a[id_a[n]]
        rb = b[id_b[n]]
        for h in range(hidden):
            scratch[h] = bias[h] + ra[h] + rb[h]
        for k in range(shared_cols.shape[0]):
            x = features[n, shared_cols[k]]
            if x != 0.0:
                wk = w_shared[k]
                for h in range(hidden):
                    scratch[h] += x * wk[h]
        row = out[n]
        for h in range(hidden):
            if scratch[h] < 0.0:
                scratch[h] = 0.0
            v = bits[h]
            lsb = (v >> np.uint32(16)) & np.uint32(1)
            row[h] = np.uint16((v + np.uint32(0x7FFF) + lsb) >> np.uint32(16))


def _fused_linear_relu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    # oneDNN's linear with ReLU as a post-op (what torch.compile emits for this pattern on
    # CPU): the ReLU costs nothing, where a separate relu_ pass over a bfloat16 [N, 256] output
    # costs ~60% of the matmul (benchmarks/selfplay_cpu.py, docs/reference/turn_search.md).
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "relu", [], "")


def _plain_linear_relu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.relu_(F.linear(x, weight, bias))


def _pick_linear_relu(dtype: torch.dtype):
    """The fused op when this torch build runs it in ``dtype`` and it agrees with the plain one,
    else plain. Per dtype: on a CPU without bfloat16 units oneDNN has no bfloat16 primitive
    (an AMD EPYC here: "could not create a primitive descriptor") while float32 fuses."""
    try:
        x = torch.randn(8, 4).to(dtype)
        w, b = torch.randn(3, 4).to(dtype), torch.randn(3).to(dtype)
        fused, plain = _fused_linear_relu(x, w, b), _plain_linear_relu(x, w, b)
        tolerance = 1e-5 if dtype == torch.float32 else 5e-2
        if torch.allclose(fused.float(), plain.float(), atol=tolerance):
            return _fused_linear_relu
    except (AttributeError, RuntimeError):
        pass
    return _plain_linear_relu


LINEAR_RELU = {dtype: _pick_linear_relu(dtype) for dtype in (torch.float32, torch.bfloat16)}


def bucket_rows(n: int) -> int:
    """``n`` rounded up to one of a few fixed row counts: 64, then four steps an octave (5/4,
    3/2, 7/4 and 2 times a power of two; at most 25% padding). oneDNN builds a kernel for
    each new shape, which costs more than the matmul at these sizes when every call has
    another row count (benchmarks/selfplay_cpu.py)."""
    if n <= 64:
        return 64
    half = 1 << ((n - 1).bit_length() - 1)  # the power of two just below n (or n/2)
    for quarters in (5, 6, 7, 8):
        size = half * quarters // 4
        if size >= n:
            return size
    return 2 * half


class TowerValues:
    """Value-only forward of a :class:`~leaguezero.yatzy.net.networks.BoardTowerNet` over numpy
    features (see module doc).

    Built once per network and dtype (the split weights are copied then): call it again after
    the network's weights change. ``dtype`` is ``torch.float32`` or ``torch.bfloat16``; the net
    is not modified.
    """

    def __init__(self, net: nn.Module, dtype: torch.dtype = torch.float32) -> None:
        if dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"tower values run in float32 or bfloat16, not {dtype}")
        self.dtype = dtype
        self._linear_relu = LINEAR_RELU[dtype]
        self.has_margin = net.margin is not None
        embed = net.embed
        with torch.no_grad():
            first, second = net.head[0], net.head[2]
            w1 = first.weight.detach().float()
            # The towers read their board's columns directly: zero weights elsewhere, so the
            # unique rows need no column gather (80 of 169 inputs; the towers now run on few rows).
            self.tower_me = self._tower(net, ME_COLS, w1[:, :embed], dtype)
            self.tower_opp = self._tower(net, OPP_COLS, w1[:, embed : 2 * embed], dtype)
            self.w_shared = np.ascontiguousarray(w1[:, 2 * embed :].T.numpy())  # [S, H]
            self.bias1 = np.ascontiguousarray(first.bias.detach().float().numpy())  # [H]
            self.w2 = second.weight.detach().to(dtype).contiguous()
            self.b2 = second.bias.detach().to(dtype).contiguous()
            heads = [net.value] + ([net.margin] if net.margin is not None else [])
            self.w_heads = torch.cat([h.weight.detach() for h in heads]).to(dtype).contiguous()
            self.b_heads = torch.cat([h.bias.detach() for h in heads]).to(dtype).contiguous()
        self.hidden = self.bias1.shape[0]
        # Work buffers, grown to the largest call and reused (a fresh 14 MB array per call
        # costs its page faults every time).
        self._rows = 0
        self._grow(1)

    def _grow(self, rows: int) -> None:
        if rows <= self._rows:
            return
        self._rows = max(rows, 2 * self._rows)
        n, hidden = self._rows, self.hidden
        self._ids = np.empty((2, n), np.int64)  # row -> its board: me, opp
        self._starts = np.empty((2, n), np.int64)  # board -> its first row: me, opp
        self._table = np.empty((2, 2 << (n - 1).bit_length()), np.int64)  # board_ids_pair scratch
        # Rows past a call's count are padding that the next layer reads and the caller drops:
        # zeros at first, an earlier call's finite values later.
        padded = bucket_rows(n)
        self._h1_bits = np.zeros((padded, hidden), np.uint16)
        self._h1_f32 = None
        if self.dtype == torch.float32:
            self._h1_f32 = np.zeros((padded, hidden), np.float32)
        self._scratch = np.empty(hidden, np.float32)

    @staticmethod
    def _tower(net: nn.Module, cols: np.ndarray, w_head: torch.Tensor, dtype: torch.dtype):
        lin1, lin2 = net.tower[0], net.tower[2]
        w_in = torch.zeros(lin1.out_features, net.num_features)
        w_in[:, torch.from_numpy(cols)] = lin1.weight.detach().float()
        return (
            w_in.to(dtype).contiguous(),
            lin1.bias.detach().to(dtype).contiguous(),
            lin2.weight.detach().to(dtype).contiguous(),
            lin2.bias.detach().to(dtype).contiguous(),
            w_head.to(dtype).contiguous(),  # the head's first layer, this tower's columns
        )

    def _tower_share(self, x: torch.Tensor, starts: np.ndarray, tower) -> np.ndarray:
        """The tower's contribution to the head's first layer, float32 [U, H], for the boards of
        rows ``starts`` (int64 [U]) of ``x`` (float32 [N, 169]); padded to a fixed row count
        by repeating the last board."""
        w_in, b_in, w_out, b_out, w_head = tower
        count = len(starts)
        index = np.full(bucket_rows(count), starts[-1], np.int64)
        index[:count] = starts
        rows = x[torch.from_numpy(index)].to(self.dtype)
        h = self._linear_relu(self._linear_relu(rows, w_in, b_in), w_out, b_out)
        return np.ascontiguousarray(F.linear(h, w_head)[:count].float().numpy())

    def __call__(self, features: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(values float32 [N], margins float32 [N] or None) for ``features`` float32 [N, 169]."""
        features = np.ascontiguousarray(features, dtype=np.float32)
        n = features.shape[0]
        self._grow(n)
        u_me, u_opp = board_ids_pair(
            features.view(np.uint32), ME_COLS, OPP_COLS, self._ids, self._starts, self._table
        )
        id_me, id_opp = self._ids[0, :n], self._ids[1, :n]
        starts_me, starts_opp = self._starts[0, :u_me], self._starts[1, :u_opp]
        with torch.inference_mode():
            x = torch.from_numpy(features)
            a = self._tower_share(x, starts_me, self.tower_me)
            b = self._tower_share(x, starts_opp, self.tower_opp)
            args = (features, SHARED_COLS, self.w_shared, self.bias1, a, id_me, b, id_opp)
            padded = bucket_rows(n)  # rows n.. of the buffers are padding (see bucket_rows)
            if self._h1_f32 is None:
                _first_layer_bf16(*args, self._h1_bits[:n], self._scratch)
                h1 = torch.from_numpy(self._h1_bits[:padded]).view(torch.bfloat16)
            else:
                _first_layer_f32(*args, self._h1_f32[:n])
                h1 = torch.from_numpy(self._h1_f32[:padded])
            h2 = self._linear_relu(h1, self.w2, self.b2)
            out = torch.tanh_(F.linear(h2, self.w_heads, self.b_heads)[:n]).float().numpy()
        values = np.ascontiguousarray(out[:, 0])
        margins = np.ascontiguousarray(out[:, 1]) if self.has_margin else None
        return values, margins
