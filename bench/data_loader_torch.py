#!/usr/bin/python3
"""PyTorch twin of bench/data_loader.cpp: one training epoch of the same CNN over the same data, fed
  prebuilt: by hand, index_select of the epoch's permutation slice
  loader0 / loader2: by torch.utils.data.DataLoader over a TensorDataset with 0 / 2 worker processes
  persist2: the same with 2 persistent_workers=True: one loader for all rounds, its processes started in the
            warm-up round and kept
  wait0 / wait2: the same through a dataset that sleeps 0.2 ms per example (a stand-in for a file read)
(the flip and decode modes of the C++ program have no twin here). The data and the model:
  --data DIR: the digits CNN (bench/digits_cnn_torch.py's make_model, the twin of examples/digits_cnn.cpp; Adam
              lr 0.003, batches of 32) on the digits IDX files of tests/digits/export_digits.py in DIR, pixels / 16,
              the first 1437 images
  without:    Conv2d(1,8,3,p1)-ReLU-MaxPool2-Conv2d(8,16,3,p1)-ReLU-MaxPool2-Flatten-Linear(784,10), Adam lr 0.01,
              over 1024 random 28x28 images in batches of 64
Rounds alternate the modes; each prints its median epoch time in the C++ program's format. Worker processes are
started inside the timed epoch (except persist2's), as oxmera's threads are.
Usage: data_loader_torch.py [--data DIR] [threads] [rounds]
"""
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset


class Waiting(Dataset):
    def __init__(self, base):
        self.base = base

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        time.sleep(0.0002)
        return self.base[i]


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits_cnn_torch import make_model as make_digits_cnn, read_idx  # noqa: E402

DIGITS = False


def make_cnn():
    torch.manual_seed(0)
    if DIGITS:
        return make_digits_cnn()
    return torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               torch.nn.Flatten(), torch.nn.Linear(16 * 7 * 7, 10))


def epoch_seconds(batches):
    net = make_cnn()
    opt = torch.optim.Adam(net.parameters(), lr=0.003 if DIGITS else 0.01)
    t0 = time.perf_counter()
    for x, y in batches():
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - t0


def main():
    global DIGITS
    args = sys.argv[1:]
    data_dir = None
    if len(args) >= 2 and args[0] == "--data":
        data_dir, args = args[1], args[2:]
    threads = int(args[0]) if len(args) > 0 else 1
    rounds = int(args[1]) if len(args) > 1 else 5
    torch.set_num_threads(threads)
    if data_dir is not None:
        import numpy as np
        DIGITS = True
        all_images = read_idx(os.path.join(data_dir, "digits-images-idx3-ubyte"))
        all_labels = read_idx(os.path.join(data_dir, "digits-labels-idx1-ubyte"))
        n, bs = len(all_images) * 4 // 5, 32
        images = torch.from_numpy(all_images[:n].astype(np.float32)).reshape(n, 1, 8, 8) / 16.0
        labels = torch.from_numpy(all_labels[:n].astype(np.int64))
    else:
        n, bs = 1024, 64
        g = torch.Generator().manual_seed(7)
        images = torch.randn(n, 1, 28, 28, generator=g)
        labels = torch.tensor([(i * 7) % 10 for i in range(n)])
    ds = TensorDataset(images, labels)
    waiting = Waiting(ds)
    modes = ["prebuilt", "loader0", "loader2", "persist2", "wait0", "wait2"]
    persistent = DataLoader(ds, batch_size=bs, shuffle=True, num_workers=2, persistent_workers=True,
                            generator=torch.Generator().manual_seed(1))
    times = {m: [] for m in modes}
    for r in range(rounds + 1):  # round 0 warms up
        for mode in modes:
            if mode == "prebuilt":
                perm = torch.randperm(n, generator=torch.Generator().manual_seed(r))

                def batches():
                    for at in range(0, n, bs):
                        idx = perm[at:at + bs]
                        yield images.index_select(0, idx), labels.index_select(0, idx)
            elif mode == "persist2":
                def batches():
                    return iter(persistent)
            else:
                source = waiting if mode.startswith("wait") else ds
                workers = 2 if mode.endswith("2") else 0
                loader = DataLoader(source, batch_size=bs, shuffle=True, num_workers=workers,
                                    generator=torch.Generator().manual_seed(r))

                def batches(loader=loader):
                    return iter(loader)
            s = epoch_seconds(batches)
            if r > 0:
                times[mode].append(s)
    for mode in modes:
        t = sorted(times[mode])
        print(f"{mode} data={'digits' if DIGITS else 'random'} threads={threads} rounds={rounds} median_ms={1e3 * t[len(t) // 2]:.1f} "
              f"min_ms={1e3 * t[0]:.1f} max_ms={1e3 * t[-1]:.1f}", flush=True)


if __name__ == "__main__":
    main()
