"""kill -9 during multi-block appends never leaves a broken chain.

A child process appends batches of blocks to a real on-disk dataset (durable writes) in a loop;
the parent SIGKILLs it at random moments. After every kill, ``refs/head`` must point at a
complete chain that passes every rule, and the child's next run must continue from it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from coordinator.storage import Dataset

WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from factories import ChainBuilder, data_slice, T0
    from coordinator.metadata import model as m, encode_block, block_hash
    from coordinator.metadata.timestamp import Timestamp
    from coordinator.storage import Dataset

    ds = Dataset(Path({root!r}))
    ds.cleanup()
    if ds.head() is None:
        ds.append_many_bytes(ChainBuilder().root_with_data(1).blocks)
    print("ready", flush=True)
    while True:
        st = ds.state()
        head, seq, last = st.head, st.sequence_number, st.last_offset
        batch = []
        for i in range(5):
            start = last + 1
            ev = m.AddData(prev_offset=last, new_data=data_slice(start, start + 9),
                           new_watermark=Timestamp(T0.epoch_ns + start))
            b = m.MetadataBlock(system_time=T0, prev_block_hash=head,
                                sequence_number=seq + 1, event=ev)
            data = encode_block(b)
            batch.append(data)
            head, seq, last = block_hash(data), seq + 1, start + 9
        ds.append_many_bytes(batch)
    """
)


def test_sigkill_during_append_keeps_chain_valid(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    Dataset.create(root)
    code = WRITER.format(tests=str(Path(__file__).parents[1]), root=str(root))
    rng = random.Random(1234)
    lengths = []
    for _ in range(12):
        proc = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == b"ready", proc.stderr.read() if proc.stderr else b""
        time.sleep(rng.uniform(0.02, 0.4))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        ds = Dataset(root)
        state = ds.state()  # walks head -> Seed, re-hashing and validating every block
        assert state.head is not None
        # Seed (0), SetDataSchema (1), then one AddData of 10 rows per block.
        assert state.last_offset is not None
        assert state.sequence_number == state.last_offset // 10 + 2
        blocks = list(ds.iter_blocks())
        assert len(blocks) == state.sequence_number + 1
        lengths.append(len(blocks))
    assert lengths == sorted(lengths), "the chain must only ever grow"
    assert lengths[-1] > lengths[0], "the writer made progress across restarts"
