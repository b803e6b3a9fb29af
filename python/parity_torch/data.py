"""parity's data and random numbers in Python: Philox4x32-10, the Markov chain, the batch split.

Bit-for-bit the same as src/core/philox.cpp, src/model/data.cpp and src/model/batch_split.cpp
(docs/model.md, "Data" and "Initialisation"), so a torch run can draw its own batches
from `data_seed` instead of reading them from a dump. Pure Python integers: about 1 ms per
sequence of 64 tokens, fine for the scenario sizes parity runs.
"""
import math

import torch

_M32 = 0xFFFFFFFF
_PHILOX_M0, _PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
_PHILOX_W0, _PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
_CHAIN_STREAM = 0x636861696E  # "chain"
_SEQ_STREAM = 0x736571  # "seq"
SUCCESSOR_WEIGHTS = (8.0, 4.0, 2.0, 1.0)


def philox(key, c0, c1):
    """Philox4x32-10 (Random123) of the 128-bit counter (c0, c1) under the 64-bit key: four words."""
    x0, x1, x2, x3 = c0 & _M32, (c0 >> 32) & _M32, c1 & _M32, (c1 >> 32) & _M32
    k0, k1 = key & _M32, (key >> 32) & _M32
    for r in range(10):
        if r:
            k0, k1 = (k0 + _PHILOX_W0) & _M32, (k1 + _PHILOX_W1) & _M32
        p0, p1 = _PHILOX_M0 * x0, _PHILOX_M1 * x2
        x0, x1, x2, x3 = (p1 >> 32) ^ x1 ^ k0, p1 & _M32, (p0 >> 32) ^ x3 ^ k1, p0 & _M32
    return x0, x1, x2, x3


def uniform_open(hi, lo):
    """Uniform in (0, 1) from 52 bits: ((hi << 20 | lo >> 12) + 0.5) * 2^-52, exact in a double."""
    return (float((hi << 20) | (lo >> 12)) + 0.5) * 2.0 ** -52


def name_hash(name):
    """64-bit FNV-1a of a parameter name (separates the parameters' random streams)."""
    h = 1469598103934665603
    for c in name.encode("utf-8"):
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def philox_normal(seed, name, index):
    """N(0, 1) for element `index` of parameter `name`: Box-Muller on one Philox block."""
    w = philox(seed, index, name_hash(name))
    u1, u2 = uniform_open(w[0], w[1]), uniform_open(w[2], w[3])
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def init_elements(seed, name, std, indices):
    """Initial values (as doubles) of the flat elements `indices` of an N(0, std) parameter.

    Pure Python, about 20 us an element: for spot checks and small models; a full model is
    read from the dump's init.safetensors instead (model.load_parity_state)."""
    return [std * philox_normal(seed, name, i) for i in indices]


class MarkovData:
    """The synthetic Markov chain of docs/model.md: sequence g of step t from (data_seed, t, g)."""

    def __init__(self, vocab, data_seed):
        if vocab < 2:
            raise ValueError("MarkovData: vocab must be at least 2")
        self.vocab, self.seed = vocab, data_seed
        self.m = min(len(SUCCESSOR_WEIGHTS), vocab)
        total = sum(SUCCESSOR_WEIGHTS[:self.m])
        self.prob, self.cdf = [], []
        for k in range(self.m):
            self.prob.append(SUCCESSOR_WEIGHTS[k] / total)
            self.cdf.append((self.cdf[-1] if k else 0.0) + self.prob[-1])
        self.cdf[-1] = 1.0
        self.next = []  # (V, m) distinct successors by rejection
        for v in range(vocab):
            row, draw = [], 0
            while len(row) < self.m:
                w = philox(data_seed, _CHAIN_STREAM, v * 1024 + draw)
                draw += 1
                cand = int(uniform_open(w[0], w[1]) * float(vocab))
                if cand not in row:
                    row.append(cand)
            self.next.append(row)

    def sequence(self, step, g, seq):
        """The S+1 tokens of sequence g of `step` (a list)."""
        key = self.seed ^ _SEQ_STREAM
        tokens = []
        for i in range(seq + 1):
            w = philox(key, step, (g << 24) | i)
            u = uniform_open(w[0], w[1])
            if i == 0:
                tokens.append(min(self.vocab - 1, int(u * float(self.vocab))))
                continue
            k = 0
            while k + 1 < self.m and u >= self.cdf[k]:
                k += 1
            tokens.append(self.next[tokens[-1]][k])
        return tokens

    def batch(self, step, g0, count, seq):
        """inputs, targets: int64 tensors (count, S) of global sequences g0 .. g0+count-1 of `step`."""
        rows = [self.sequence(step, g0 + b, seq) for b in range(count)]
        t = torch.tensor(rows, dtype=torch.int64).reshape(count, seq + 1)
        return t[:, :-1].contiguous(), t[:, 1:].contiguous()

    def sequences(self, step, index, seq):
        """inputs, targets (len(index), S) of the global sequences `index` of `step`, in that order."""
        rows = [self.sequence(step, int(g), seq) for g in index]
        t = torch.tensor(rows, dtype=torch.int64).reshape(len(rows), seq + 1)
        return t[:, :-1].contiguous(), t[:, 1:].contiguous()

    def entropy_floor(self):
        return -sum(p * math.log(p) for p in self.prob)


def micro_batch_sequences(batch, microbatches, mb):
    """[begin, end) of micro-batch mb: torch.tensor_split's rule (the first batch % M hold one more)."""
    if not 1 <= microbatches <= batch:
        raise ValueError(f"microbatches must be in [1, batch ({batch})], got {microbatches}")
    q, r = divmod(batch, microbatches)
    begin = mb * q + min(mb, r)
    return begin, begin + q + (1 if mb < r else 0)


def dp_sequences(batch, microbatches, mb, dp, dp_index):
    """[begin, end) of data-parallel rank dp_index's part of micro-batch mb: torch.chunk's rule
    (pieces of ceil(n / dp), trailing ranks get fewer or none)."""
    b, e = micro_batch_sequences(batch, microbatches, mb)
    n = e - b
    c = (n + dp - 1) // dp
    return b + min(dp_index * c, n), b + min((dp_index + 1) * c, n)
