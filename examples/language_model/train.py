"""Language model: an LSTM on synthetic tokens, CPU-insensitive (its loader does almost nothing).

    python examples/language_model/train.py --epochs 1

The tokens come from a deterministic generator (sequence i is a function of --seed and i):
each sequence follows ``next = (a * token + b) mod vocab`` with occasional random tokens, so
the model has something to learn. Making a batch costs microseconds; the step is the model's
compute, so more --workers (CPUs for the loader) change nothing: the CPU-insensitive end of
Synergy's profiles. Prints one line per epoch: ``epoch E step S loss L samples/s X``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

if __package__ in (None, ""):  # run as a file: make `examples` importable from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from examples import common  # noqa: E402
from synergy.iterator import SynergyIterator  # noqa: E402


class SyntheticTokens(Dataset):
    """`count` token sequences of `length` + 1 (input and shifted target), deterministic per index."""

    def __init__(self, count: int, length: int, vocab: int, seed: int = 0) -> None:
        self.count, self.length, self.vocab, self.seed = count, length, vocab, seed

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> torch.Tensor:
        rng = np.random.default_rng([self.seed, index])
        tokens = np.empty(self.length + 1, dtype=np.int64)
        tokens[0] = rng.integers(self.vocab)
        noise = rng.random(self.length) < 0.1
        random_tokens = rng.integers(self.vocab, size=self.length)
        for t in range(self.length):
            tokens[t + 1] = random_tokens[t] if noise[t] else (5 * tokens[t] + 3) % self.vocab
        return torch.from_numpy(tokens)


class LSTMModel(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, dim, batch_first=True)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(tokens))
        return self.head(out)


def main(argv: Sequence[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--sequences", type=int, default=2048, help="sequences per epoch")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    args = common.parse(p, "language_model", argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dataset = SyntheticTokens(args.sequences, args.seq_len, args.vocab, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    model = LSTMModel(args.vocab, args.hidden)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    loader = SynergyIterator(loader, state={"model": model, "optimizer": opt})  # the one added line
    steps = 0
    for epoch in range(args.epochs):
        meter = common.EpochMeter()
        for tokens in loader:
            logits = model(tokens[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            meter.add(len(tokens), loss.item())
            if args.max_steps and common.job_step(loader, steps) >= args.max_steps:
                break
        if meter.batches:
            print(meter.line(epoch, common.job_step(loader, steps)), flush=True)
        if args.max_steps and common.job_step(loader, steps) >= args.max_steps:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
