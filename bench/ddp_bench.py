"""DDP training throughput, backend chorus against gloo, side by side.

Starts N local ranks itself (TCPStore rendezvous); every rank builds one
chorus group (the default group) and one gloo group, and trains the same MLP (about 25 M float32 parameters:
1024 -> 4096 -> 4096 -> 1024, ReLU) with DDP's default bucketing on each in
turn: `rounds` rounds, each `steps` timed steps per backend after one
untimed step, alternating chorus and gloo so that both see the same machine
load. Prints one JSON line per backend and round from rank 0 and, at the
end, the median samples/s of each backend and their ratio.

Chorus's transport is `auto` (shm between these local ranks) unless
CHORUS_TRANSPORT, CHORUS_TRANSPORT_NAME or CHORUS_CONFIG choose one: the
library's own default is tcp, which is not what this benchmark compares.
Every rank runs torch with 1 intra-op and 1 inter-op thread (OMP_NUM_THREADS=1
too), the same for both backends, which share each process.

  /usr/bin/python3 bench/ddp_bench.py --ext build/tests/embedding/torch/ext \\
      --ranks 4 --json ddp.jsonl --plot docs/benchmarks-ddp.png
  --profile adds a per-step split (forward+backward including the wait for
  the reduced buckets, optimizer), the same step without DDP (no
  communication at all) as the compute floor, and the time of one all_reduce
  of a DDP bucket (25 MiB) and of all gradients alone per backend, measured
  on rank 0.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ext", help="directory holding the built chorus_torch (PYTHONPATH)")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    p.add_argument("--steps", type=int, default=5, help="timed steps per round and backend")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--json", help="append the per-round results here")
    p.add_argument("--plot", help="write a bar chart (PNG) of samples/s per round")
    p.add_argument("--profile", action="store_true")
    return p.parse_args()


def launcher(a):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               WORLD_SIZE=str(a.ranks), OMP_NUM_THREADS="1", DDP_BENCH_WORKER="1")
    if not any(k in env for k in ("CHORUS_TRANSPORT", "CHORUS_TRANSPORT_NAME", "CHORUS_CONFIG")):
        env["CHORUS_TRANSPORT"] = "auto"
    if a.ext:
        env["PYTHONPATH"] = a.ext + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    procs = [subprocess.Popen([sys.executable, __file__, *sys.argv[1:]],
                              env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE if r else None, text=True)
             for r in range(a.ranks)]
    rc = 0
    for p in procs:
        p.communicate(timeout=3600)
        rc = rc or p.returncode
    return rc


def worker(a):
    import datetime

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    import chorus_torch

    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    threads = (torch.get_num_threads(), torch.get_num_interop_threads())
    dist.init_process_group("chorus", timeout=datetime.timedelta(seconds=600))
    groups = {"chorus": dist.group.WORLD,
              "gloo": dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=600))}
    w = a.width
    torch.manual_seed(0)
    models = {}
    for name, g in groups.items():
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(1024, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(),
                          nn.Linear(w, 1024))
        models[name] = (DDP(m, process_group=g), torch.optim.SGD(m.parameters(), lr=1e-3))
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(1024, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(),
                          nn.Linear(w, 1024))
    models["none"] = (plain, torch.optim.SGD(plain.parameters(), lr=1e-3))
    params = sum(p.numel() for p in models["chorus"][0].parameters())
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(a.batch, 1024, generator=gen)
    y = torch.randn(a.batch, 1024, generator=gen)
    results = {n: [] for n in groups}
    split = {n: [0.0, 0.0, 0.0] for n in models}

    def step(name, prof):
        ddp, opt = models[name]
        t0 = time.perf_counter()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()  # returns once DDP has waited for every bucket
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad()
        t2 = time.perf_counter()
        if prof:
            split[name][0] += t1 - t0
            split[name][1] += t2 - t1

    for rnd in range(a.rounds):
        for name in groups:
            step(name, False)
            dist.barrier(group=groups["gloo"])
            t0 = time.perf_counter()
            for _ in range(a.steps):
                step(name, a.profile)
            dist.barrier(group=groups["gloo"])
            dt = time.perf_counter() - t0
            sps = a.steps * a.batch * a.ranks / dt
            results[name].append(sps)
            if rank == 0:
                line = {"bench": "ddp", "backend": name, "round": rnd, "ranks": a.ranks,
                        "params": params, "batch": a.batch, "steps": a.steps,
                        "samples_per_s": round(sps, 2), "step_ms": round(1e3 * dt / a.steps, 1),
                        "transport": os.environ.get("CHORUS_TRANSPORT", "from config"),
                        "torch_threads": threads}
                print(json.dumps(line), flush=True)
                if a.json:
                    with open(a.json, "a") as f:
                        f.write(json.dumps(line) + "\n")
    comm = {}
    if a.profile:
        # The compute floor: the same step without DDP, every rank at once
        # (so the CPU sharing is the same), no communication.
        for _ in range(a.steps * a.rounds):
            dist.barrier(group=groups["gloo"])
            step("none", True)
        # The communication alone: one all_reduce of a DDP bucket (25 MiB,
        # DDP's default bucket_cap_mb) and of every gradient (one buffer of
        # the model's size), 5 times per backend, median.
        for label, numel in (("25 MiB bucket", 25 * 2**20 // 4),
                             (f"{4 * params / 1e6:.0f} MB (all gradients)", params)):
            buf = torch.ones(numel)
            for name, g in groups.items():
                ts = []
                for _ in range(5):
                    dist.barrier(group=groups["gloo"])
                    t0 = time.perf_counter()
                    dist.all_reduce(buf, group=g)
                    ts.append(time.perf_counter() - t0)
                comm[(name, label)] = statistics.median(ts)
    if rank == 0:
        med = {n: statistics.median(v) for n, v in results.items()}
        print(f"# {params / 1e6:.1f} M parameters, {a.ranks} ranks, batch {a.batch}/rank: "
              f"chorus {med['chorus']:.1f} samples/s, gloo {med['gloo']:.1f} samples/s, "
              f"ratio {med['chorus'] / med['gloo']:.2f}", flush=True)
        if a.profile:
            n = a.steps * a.rounds
            for name, (fb, op, _) in split.items():
                name = "none (same step without DDP)" if name == "none" else name
                print(f"# profile {name}: forward+backward (incl. waiting for the reduced "
                      f"buckets) {1e3 * fb / n:.1f} ms/step, optimizer {1e3 * op / n:.1f} ms/step",
                      flush=True)
            for (name, label), t in comm.items():
                print(f"# profile {name}: all_reduce of {label} alone, median of 5: "
                      f"{1e3 * t:.0f} ms", flush=True)
            c = chorus_torch.counters()
            print("# chorus counters: " + ", ".join(f"{k}={v}" for k, v in sorted(c.items())
                                                    if not k.startswith("peer.")), flush=True)
        if a.plot:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots(figsize=(6, 3.5))
            names = list(results)
            for i, n in enumerate(names):
                xs = [r + (i - 0.5) * 0.38 for r in range(a.rounds)]
                ax.bar(xs, results[n], width=0.36, label=f"{n} (median {med[n]:.1f})")
            ax.set_xticks(range(a.rounds))
            ax.set_xticklabels([f"round {r + 1}" for r in range(a.rounds)])
            ax.set_ylabel("samples/s (all ranks)")
            ax.set_title(f"DDP, MLP {params / 1e6:.0f} M params, {a.ranks} ranks, "
                         f"batch {a.batch}/rank: chorus/gloo {med['chorus'] / med['gloo']:.2f}x")
            ax.legend(loc="lower right")
            fig.tight_layout()
            fig.savefig(a.plot, dpi=100)
    dist.destroy_process_group()


if __name__ == "__main__":
    args = parse()
    if os.environ.get("DDP_BENCH_WORKER"):
        worker(args)
    else:
        sys.exit(launcher(args))
