"""The image example through a CPU DALI pipeline and DALIGenericIterator.

    python examples/dali/train.py --epochs 1

The same generated JPEGs and small CNN as examples/image_classification, but read, decoded,
cropped and flipped by DALI on the CPU (``device_id=None``, ``--workers`` DALI threads). The
pipeline is built with ``enable_checkpointing=True`` from `synergy.iterator.dali.resume_checkpoint()`,
so a relaunched job continues exactly at its next unconsumed batch without re-reading any; the
one-line `SynergyIterator` wrap does the rest. Prints one line per epoch:
``epoch E step S loss L samples/s X``; ``--record FILE`` appends ``step epoch id,id,...`` for
every batch trained (how the tests check that a resume repeats and skips nothing).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Sequence

if __package__ in (None, ""):  # run as a file: make `examples` importable from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from nvidia.dali import fn, pipeline_def, types  # noqa: E402
from nvidia.dali.plugin.base_iterator import LastBatchPolicy  # noqa: E402
from nvidia.dali.plugin.pytorch import DALIGenericIterator  # noqa: E402

from examples import common  # noqa: E402
from examples.image_classification import data  # noqa: E402
from examples.image_classification.model import SmallCNN  # noqa: E402
from synergy.iterator import SynergyIterator  # noqa: E402
from synergy.iterator.dali import resume_checkpoint  # noqa: E402

READER = "Reader"


@pipeline_def(device_id=None)
def image_pipeline(files: list[str], crop: int, shard: int, shards: int):  # type: ignore[no-untyped-def]
    """Read (shuffled), decode on CPU, random crop and flip; outputs (image CHW float, sample id)."""
    jpegs, ids = fn.readers.file(files=files, labels=list(range(len(files))), random_shuffle=True,
                                 initial_fill=len(files), pad_last_batch=True, shard_id=shard,
                                 num_shards=shards, name=READER)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    images = fn.crop_mirror_normalize(
        images, crop=(crop, crop), crop_pos_x=fn.random.uniform(range=(0.0, 1.0)),
        crop_pos_y=fn.random.uniform(range=(0.0, 1.0)), mirror=fn.random.coin_flip(),
        mean=[0.0, 0.0, 0.0], std=[255.0, 255.0, 255.0], dtype=types.FLOAT, output_layout="CHW")
    return images, ids


def build_iterator(files: Sequence[Path], batch_size: int, threads: int, image_size: int, seed: int,
                   rank: int = 0, world: int = 1) -> DALIGenericIterator:
    """A DALIGenericIterator over `files`, resumed from the job's checkpoint when there is one."""
    pipe = image_pipeline(files=[str(f) for f in files], crop=int(image_size * data.CROP_FRACTION),
                          shard=rank, shards=world, seed=seed + 1, batch_size=batch_size,
                          num_threads=max(1, threads), enable_checkpointing=True, checkpoint=resume_checkpoint())
    return DALIGenericIterator([pipe], ["images", "ids"], reader_name=READER,
                               last_batch_policy=LastBatchPolicy.PARTIAL)


def main(argv: Sequence[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0], images=True)
    p.add_argument("--record", type=Path, default=None, help="append 'step epoch ids' per batch trained")
    p.add_argument("--step-sleep-s", type=float, default=0.0,
                   help="pause after every step: a slower accelerator (the tests stop a job mid-run with it)")
    args = common.parse(p, "dali", argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    files = data.ensure_images(args.data_dir, args.images, args.image_size, seed=args.seed)
    loader = build_iterator(files, args.batch_size, args.workers, args.image_size, args.seed)
    model = SmallCNN(data.CLASSES)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = SynergyIterator(loader, state={"model": model, "optimizer": opt})  # the one added line
    record = open(args.record, "a") if args.record else None
    steps = 0
    for epoch in range(args.epochs):
        meter = common.EpochMeter()
        for batch in loader:
            x, ids = batch[0]["images"], batch[0]["ids"].flatten().long()
            y = ids % data.CLASSES  # data.label_of, vectorised
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            meter.add(len(ids), loss.item())
            step = common.job_step(loader, steps)
            if record is not None:
                record.write(f"{step} {epoch} {','.join(map(str, ids.tolist()))}\n")
                record.flush()
            if args.step_sleep_s:
                time.sleep(args.step_sleep_s)
            if args.max_steps and step >= args.max_steps:
                break
        if meter.batches:
            print(meter.line(epoch, common.job_step(loader, steps)), flush=True)
        if args.max_steps and common.job_step(loader, steps) >= args.max_steps:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
