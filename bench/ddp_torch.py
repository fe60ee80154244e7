"""Twin of bench/ddp_step.cpp: torch.nn.parallel.DistributedDataParallel (gloo) over 2 processes x 1 thread.
  ddp_torch.py init FILE MODEL        writes the initial state dict and the global batch (safetensors)
  ddp_torch.py run FILE STEPS T MODEL  times STEPS training steps (after 5 warm-up steps), then the overlap
MODEL: mlp (2-32-32-2 tanh) or wide (784-1024-1024-10 relu); global batch 256, cross entropy, SGD lr 0.05.
Each of the 2 processes (torch.multiprocessing, MASTER_ADDR 127.0.0.1, a free port) trains on its half.
Rank 0 prints "ddp-MODEL ... median_us=.. p10_us=..", its local losses, and "overlap local_us=.. ddp_us=..
allreduce_us=.. hidden=..": forward+backward under no_sync() (no communication), the same with DDP's reduction,
and one all_reduce of all gradients alone (each rep starts after a barrier; the no_sync one ends with one too,
so that it is the slowest rank's backward, which the synced one waits for); hidden = (local + allreduce - ddp) / allreduce, the share of the
all-reduce that backward hid (1: all, 0: none; below 0: DDP costs more than its all-reduce)."""
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from lstm_torch import read, write  # noqa: E402  (the safetensors helpers)

WORLD, GLOBAL_BATCH, WARMUP = 2, 256, 5
SIZES = {"mlp": ([2, 32, 32, 2], torch.nn.Tanh), "wide": ([784, 1024, 1024, 10], torch.nn.ReLU)}


def model(name):
    sizes, act = SIZES[name]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(act())
    return torch.nn.Sequential(*layers)


def worker(rank, port, path, steps, threads, name):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    f = read(path)
    x, y = f.pop("data.x"), f.pop("data.y").long()
    per = GLOBAL_BATCH // WORLD
    x, y = x[rank * per:(rank + 1) * per].contiguous(), y[rank * per:(rank + 1) * per].contiguous()
    m = model(name)
    m.load_state_dict(f)
    # BUCKET_MB (both sides, default 25: torch's bucket_cap_mb) sets the bucket size, to see the overlap.
    # GRAD_AS_BUCKET_VIEW=1 (both sides): gradient_as_bucket_view.
    ddp = torch.nn.parallel.DistributedDataParallel(m, bucket_cap_mb=float(os.environ.get("BUCKET_MB", "25")),
                                                    gradient_as_bucket_view=os.environ.get("GRAD_AS_BUCKET_VIEW") == "1")
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    times, losses = [], []
    for s in range(WARMUP + steps):
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        losses.append(loss.item())
        if s >= WARMUP:
            times.append((t1 - t0) * 1e6)
    flat = torch.zeros(sum(p.numel() for p in m.parameters()))
    phases = {"local": [], "ddp": [], "allreduce": []}

    def timed(key, fn):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        phases[key].append((time.perf_counter() - t0) * 1e6)

    def local():
        with ddp.no_sync():
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
        dist.barrier()  # the slowest rank's backward: the synced phase waits for it too

    def synced():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()

    for s in range(WARMUP + steps):
        timed("local", local)
        timed("ddp", synced)
        timed("allreduce", lambda: dist.all_reduce(flat))
    if rank == 0:
        t = sorted(times)
        n = len(t)
        print(f"ddp-{name} threads={threads} ranks={WORLD} steps={n} median_us={t[n // 2]:.2f} "
              f"p10_us={t[n // 10]:.2f} p90_us={t[n * 9 // 10]:.2f} loss={losses[-1]:.6f}")
        print("losses " + " ".join(f"{v:.7f}" for v in losses))
        med = {k: statistics.median(v[WARMUP:]) for k, v in phases.items()}
        hidden = (med["local"] + med["allreduce"] - med["ddp"]) / med["allreduce"]
        info = ddp._get_ddp_logging_data()  # torch re-buckets after the first step in the order grads arrived
        buckets = len(str(info.get("rebuilt_bucket_sizes") or info.get("bucket_sizes", "")).split(", "))
        print(f"overlap local_us={med['local']:.2f} ddp_us={med['ddp']:.2f} allreduce_us={med['allreduce']:.2f} "
              f"hidden={hidden:.3f} buckets={buckets}", flush=True)
    dist.destroy_process_group()


def main():
    if sys.argv[1] == "init":
        name = sys.argv[3]
        torch.manual_seed(0)
        m = model(name)
        items = {k: v.detach().numpy() for k, v in m.state_dict().items()}
        items["data.x"] = torch.randn(GLOBAL_BATCH, SIZES[name][0][0]).numpy()
        items["data.y"] = torch.randint(0, SIZES[name][0][-1], (GLOBAL_BATCH,)).float().numpy()
        write(sys.argv[2], items)
        return
    path, steps, threads, name = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(worker, args=(port, path, steps, threads, name), nprocs=WORLD)


if __name__ == "__main__":
    main()
