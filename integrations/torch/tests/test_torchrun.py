"""A 4-rank `torchrun --standalone` DDP job (torchrun_ddp.py) that must train
to the same parameters on chorus as on gloo."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_torchrun_standalone_ddp_n4():
    # --redirects/--tee 2: Debian's torchrun 1.13 on Python 3.11 cannot parse
    # its own defaults (docs/embedding.md).
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4",
           "--redirects", "2", "--tee", "2", os.path.join(HERE, "torchrun_ddp.py")]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=240, env=dict(os.environ, OMP_NUM_THREADS="1"))
    print(p.stdout)
    assert p.returncode == 0
    for r in range(4):
        assert f"torchrun ddp rank {r}/4" in p.stdout
    assert p.stdout.count(": OK") == 4
