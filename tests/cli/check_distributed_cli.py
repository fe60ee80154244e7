#!/usr/bin/env python3
"""ctest `cli_distributed_*`: `mpirun -np N oxmera train --distributed` (tests/distributed/run_mpi.sh launches).

  parity     np 2 and np 4 (batch 32), np 3 (batch 36: the epoch's last batch of 4 rows splits 1/1/2) and np 6
             (batch 252: its last 4 rows leave ranks 0 and 3 without rows) log the same per-epoch losses as one
             process on the same global batch, to 1e-5 relative, and the same accuracies; rank 0 alone prints
             (one header naming the world size, one line per epoch, no progress bar); a batch that the world
             size does not divide is a typed error saying so, as are ranks started with different seeds;
             --tui: rank 0 alone draws the dashboard (and a rank 0 that cannot is an error on every rank);
             launched without --distributed, the processes train alone and rank 0 warns once.
  resume     a checkpoint written at np 2 after 2 epochs resumes at np 1, np 2, np 4 and without mpirun, and a
             single-process checkpoint resumes at np 2: the third epoch matches the uninterrupted np 2 run's;
             SIGINT to rank 1 mid-run stops every rank after the same step and rank 0 saves one checkpoint,
             which resumes at np 2 and np 1 on the same curve.
  cnn        the digits CNN at np 2 logs one process's losses and its checkpoint resumes in one process
             (skipped without numpy and scikit-learn: run it with /usr/bin/python3).
  lm         the character language models (--model transformer, lstm; 3 epochs of 5 steps, batch 8 windows):
             np 2 logs one process's losses and held-out accuracies, and an np 2 checkpoint after 2 epochs
             resumes in one process on the same curve.
  no-launcher  --distributed outside mpirun: exit 1 and the typed error (InvalidArgument naming the launcher
             variables, or BackendUnavailable in a build without MPI).

Usage: check_distributed_cli.py PATH/TO/oxmera MODE WORKDIR MPIEXEC|--no-mpi
Exits 77 (skipped) with the reason when MPI is not compiled in or the launcher is absent (parity, resume, cnn).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_MPI = os.path.join(HERE, "..", "distributed", "run_mpi.sh")
# One intra-op thread per rank: several ranks share the machine's cores.
ENV = dict(os.environ, OMP_NUM_THREADS="1")
for var in list(ENV):  # a test started inside a launcher's job must not look launched itself
    if var.startswith(("OMPI_", "PMI_", "PMIX_", "SLURM_")):
        del ENV[var]
failed = 0


def check(name, ok, detail=""):
    global failed
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {detail}"))
    failed += 0 if ok else 1


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, timeout=120)


def train(oxmera, *args):
    return run([oxmera, "train", *args])


def mpi_train(mpiexec, np, oxmera, *args):
    r = run(["sh", RUN_MPI, mpiexec, str(np), oxmera, "train", "--distributed", *args])
    if r.returncode == 77:
        print(r.stdout.strip())
        sys.exit(77)
    return r


def metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


EPOCH_LINE = re.compile(r"^epoch +\d+/\d+ +loss ", re.M)
worst_rel = 0.0  # the largest relative loss difference seen, printed at the end


def close(a, b, rel=1e-5):
    global worst_rel
    d = abs(a - b) / max(abs(a), abs(b), 1e-30)
    worst_rel = max(worst_rel, d)
    return d <= rel


def same_epochs(name, got, want):
    check(f"{name}: epochs", [m["epoch"] for m in got] == [m["epoch"] for m in want], (got, want))
    for g, w in zip(got, want):
        check(f"{name}: epoch {g['epoch']} loss {g['loss']:.9g} vs {w['loss']:.9g}", close(g["loss"], w["loss"]))
        check(f"{name}: epoch {g['epoch']} accuracy", g["accuracy"] == w["accuracy"], (g, w))


def ok_run(name, r):
    check(f"{name}: exit 0", r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r.returncode == 0


def parity(oxmera, mpiexec, p):
    # (3, 36): the epoch's last batch of 4 rows splits 1/1/2; (6, 252): its last batch of 4 rows leaves ranks
    # 0 and 3 without rows (they run another rank's row weighted by 0).
    for np, batch in ((2, 32), (3, 36), (4, 32), (6, 252)):
        single = p(f"single-b{batch}.jsonl")
        r = train(oxmera, "--epochs", "3", "--batch", str(batch), "--metrics", single)
        if not ok_run(f"one process, batch {batch}", r):
            continue
        dist = p(f"np{np}-b{batch}.jsonl")
        r = mpi_train(mpiexec, np, oxmera, "--epochs", "3", "--batch", str(batch), "--metrics", dist)
        if not ok_run(f"np {np}, batch {batch}", r):
            continue
        lines = r.stdout.splitlines()
        headers = [line for line in lines if line.startswith("oxmera train:")]
        check(f"np {np}: one header", len(headers) == 1, r.stdout)
        check(f"np {np}: header names the world",
              len(headers) == 1 and headers[0].endswith(f"distributed over {np} ranks (MPI)"), headers)
        check(f"np {np}: one line per epoch", len(EPOCH_LINE.findall(r.stdout)) == 3, r.stdout)
        check(f"np {np}: no progress bar under mpirun", "[#" not in r.stdout, r.stdout)
        same_epochs(f"np {np} vs one process, batch {batch}", metrics(dist), metrics(single))
    r = mpi_train(mpiexec, 3, oxmera, "--epochs", "1", "--batch-size", "32")
    check("batch 32 over 3 ranks: exit non-zero", r.returncode != 0, r)
    check("batch 32 over 3 ranks: typed message",
          "[InvalidArgument] oxmera train --distributed: --batch 32 is the global batch" in r.stderr
          and "not divisible by 3" in r.stderr and "--batch 33" in r.stderr, r.stderr)
    check("batch 32 over 3 ranks: nothing trained", "epoch " not in r.stdout, r.stdout)
    # A per-rank --seed (another batch order on each rank): caught before training, on every rank.
    r = run(["sh", RUN_MPI, mpiexec, "2", "sh", "-c",
             f'exec "{oxmera}" train --distributed --epochs 1 --seed $((7 + OMPI_COMM_WORLD_RANK))'])
    check("a different --seed per rank: exit non-zero", r.returncode != 0, r)
    check("a different --seed per rank: typed message on every rank",
          r.stderr.count("[InvalidArgument] oxmera train --distributed: the ranks were started with different") == 2
          and "train.seed=7" in r.stderr and "train.seed=8" in r.stderr, r.stderr)
    check("a different --seed per rank: nothing trained", EPOCH_LINE.search(r.stdout) is None, r.stdout)
    tui(oxmera, mpiexec)
    # Launched without --distributed: independent copies, and a warning saying so (once, from rank 0).
    r = run(["sh", RUN_MPI, mpiexec, "2", oxmera, "train", "--epochs", "1"])
    if ok_run("np 2 without --distributed", r):
        check("np 2 without --distributed: one warning", r.stderr.count("but without --distributed") == 1,
              r.stderr)
        check("np 2 without --distributed: both processes train", len(EPOCH_LINE.findall(r.stdout)) == 2, r.stdout)


def tui(oxmera, mpiexec):
    """--tui --distributed with no keyboard (stdin /dev/null) and mpirun's output in a pipe: rank 0 draws the
    dashboard (Open MPI gives it a pty), the other ranks print nothing, the done frame ends the run with exit 0
    since nobody can press q. (tests/tui's ctest tui_distributed drives it in a terminal, with keys.)"""
    env = dict(ENV, TERM="xterm-256color", COLUMNS="100", LINES="45")
    cmd = ["sh", RUN_MPI, mpiexec, "2", oxmera, "train", "--distributed", "--tui", "--epochs", "2"]
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=env, timeout=120)
    if ok_run("--tui --distributed, no keyboard", r):
        check("--tui --distributed: rank 0's dashboard", "ranks 2 (MPI)" in r.stdout and "done" in r.stdout,
              r.stdout[-2000:])
        check("--tui --distributed: no plain lines from any rank",
              EPOCH_LINE.search(r.stdout) is None and "oxmera train:" not in r.stdout, r.stdout[-2000:])
        check("--tui --distributed: one dashboard", r.stdout.count("ranks 2 (MPI)") >= 1 and
              r.stdout.count("\x1b[?1049h") == 1, r.stdout.count("\x1b[?1049h"))
        # (A sanitizer build prints LeakSanitizer's suppression statistics there, and clang's runtime the
        # "LLVMSymbolizer: error reading file" of a mapping it cannot symbolise: neither is oxmera's error.)
        stderr = "\n".join(l for l in r.stderr.splitlines() if not l.startswith("LLVMSymbolizer: error reading file"))
        check("--tui --distributed: no error on stderr", "error" not in stderr.lower(), r.stderr)
    # A rank 0 that cannot draw: every rank fails, with rank 0's reason, before any training.
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=dict(env, TERM="dumb"), timeout=120)
    check("--tui --distributed, TERM=dumb: exit non-zero", r.returncode != 0, r)
    check("--tui --distributed, TERM=dumb: rank 0's reason and the others' pointer to it",
          "oxmera: error (rank 0): train: --tui needs a capable terminal" in r.stderr
          and "oxmera: error (rank 1): train --tui --distributed: rank 0 could not open the dashboard" in r.stderr,
          r.stderr)
    check("--tui --distributed, TERM=dumb: nothing trained", "epoch" not in r.stdout, r.stdout)


def resume(oxmera, mpiexec, p):
    r = mpi_train(mpiexec, 2, oxmera, "--epochs", "3", "--metrics", p("full.jsonl"))
    if not ok_run("np 2, 3 epochs", r):
        return
    full = metrics(p("full.jsonl"))
    ckpt_dir = p("ckpt")
    os.makedirs(ckpt_dir, exist_ok=True)
    ckpt = os.path.join(ckpt_dir, "np2.safetensors")
    r = mpi_train(mpiexec, 2, oxmera, "--epochs", "2", "--checkpoint", ckpt, "--metrics", p("first2.jsonl"))
    if not ok_run("np 2, 2 epochs with --checkpoint", r):
        return
    check("np 2: one checkpoint file, no stray temporaries", os.listdir(ckpt_dir) == ["np2.safetensors"],
          os.listdir(ckpt_dir))
    same_epochs("np 2 first two epochs", metrics(p("first2.jsonl")), full[:2])
    for label, launch in (("np 1", lambda *a: mpi_train(mpiexec, 1, oxmera, *a)),
                          ("np 2", lambda *a: mpi_train(mpiexec, 2, oxmera, *a)),
                          ("np 4", lambda *a: mpi_train(mpiexec, 4, oxmera, *a)),
                          ("without mpirun", lambda *a: train(oxmera, *a))):
        out = p(f"resumed-{label.replace(' ', '')}.jsonl")
        r = launch("--epochs", "3", "--resume", ckpt, "--metrics", out)
        if ok_run(f"resume np 2's checkpoint {label}", r):
            same_epochs(f"resumed {label} vs np 2 uninterrupted", metrics(out), full[2:])
    single_ckpt = p("single.safetensors")
    r = train(oxmera, "--epochs", "2", "--checkpoint", single_ckpt)
    if ok_run("one process, 2 epochs with --checkpoint", r):
        r = mpi_train(mpiexec, 2, oxmera, "--epochs", "3", "--resume", single_ckpt, "--metrics", p("from-single.jsonl"))
        if ok_run("resume a single-process checkpoint at np 2", r):
            same_epochs("single-process checkpoint resumed at np 2", metrics(p("from-single.jsonl")), full[2:])


def rank_pid(launcher_pid, rank):
    """The pid of the child of `launcher_pid` (mpirun) that Open MPI started as `rank`, or None."""
    for _ in range(200):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                if ppid != launcher_pid:
                    continue
                with open(f"/proc/{entry}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
                return int(entry)
        time.sleep(0.01)
    return None


def interrupted(oxmera, mpiexec, p):
    """A signal to one rank mid-run: every rank stops after the same step, rank 0 saves, and resuming (np 2,
    np 1) continues the uninterrupted run's curve, the interrupted epoch's loss included."""
    ckpt, log = p("stopped.safetensors"), p("stopped.jsonl")
    # Batch 4: 64 steps an epoch, so the stop nearly always lands mid-epoch (the partial loss sum is saved).
    job = subprocess.Popen(["sh", RUN_MPI, mpiexec, "2", oxmera, "train", "--distributed", "--epochs", "100000",
                            "--batch", "4", "--checkpoint", ckpt, "--metrics", log], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=ENV)
    deadline = time.time() + 60
    while time.time() < deadline and job.poll() is None:
        if os.path.exists(log) and os.path.getsize(log) > 0:
            break
        time.sleep(0.005)
    # SIGINT to rank 1 alone (mpirun takes about a second to pass its own signals on): the ranks agree on the
    # stop through an all-reduce, so rank 0 stops after the same step and saves.
    rank1 = rank_pid(job.pid, 1)
    check("rank 1's process found", rank1 is not None)
    if rank1 is None:
        job.kill()
        job.communicate()
        return
    os.kill(rank1, signal.SIGINT)
    out, err = job.communicate(timeout=60)
    check("SIGINT to rank 1: the job ends non-zero (the ranks die by the signal)", job.returncode != 0, out + err)
    check("SIGINT to rank 1: rank 0 reports the stop once", out.count("stopped by signal 2 after step") == 1,
          out + err)
    check("SIGINT to rank 1: checkpoint saved", "checkpoint saved to" in out and os.path.exists(ckpt), out)
    if not os.path.exists(ckpt):
        return
    done = len(metrics(log))
    with open(ckpt, "rb") as f:  # safetensors: u64 header length, then the JSON header
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    mid_epoch = header["__metadata__"]["train.epoch_loss_sum"] != "0x0p+0"
    print(f"note: stopped after epoch {done} {'mid-epoch' if mid_epoch else 'at the epoch end'}")
    epochs = str(done + 2)  # the interrupted epoch (or the next, when it stopped at an epoch's end) and one more
    r = mpi_train(mpiexec, 2, oxmera, "--epochs", epochs, "--batch", "4", "--metrics", p("ref.jsonl"))
    if not ok_run(f"np 2, {epochs} epochs uninterrupted", r):
        return
    ref = metrics(p("ref.jsonl"))[done:]
    for label, launch in (("np 2", lambda *a: mpi_train(mpiexec, 2, oxmera, *a)),
                          ("np 1", lambda *a: mpi_train(mpiexec, 1, oxmera, *a))):
        out_path = p(f"after-stop-{label.replace(' ', '')}.jsonl")
        r = launch("--epochs", epochs, "--batch", "4", "--resume", ckpt, "--metrics", out_path)
        if ok_run(f"resume the interrupted run {label}", r):
            same_epochs(f"interrupted at epoch {done + 1}, resumed {label}", metrics(out_path), ref)


def cnn(oxmera, mpiexec, p):
    """The digits CNN (--model cnn): np 2 logs one process's losses; an np 2 checkpoint resumes at np 1. lr 1e-3:
    at the default 3e-3 this training amplifies f32 summation-order differences (about 1e-4 relative by
    epoch 3, from 1e-9 in epoch 1)."""
    data = p("digits")
    r = subprocess.run([sys.executable, os.path.join(HERE, "..", "digits", "export_digits.py"), data],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode == 77:
        print(r.stdout.strip())
        sys.exit(77)
    check("digits exported", r.returncode == 0, r.stdout)
    if r.returncode != 0:
        return
    common = ["--model", "cnn", "--data", data, "--lr", "1e-3"]
    r = train(oxmera, *common, "--epochs", "3", "--metrics", p("cnn-single.jsonl"))
    if not ok_run("cnn, one process", r):
        return
    single = metrics(p("cnn-single.jsonl"))
    ckpt = p("cnn-np2.safetensors")
    r = mpi_train(mpiexec, 2, oxmera, *common, "--epochs", "2", "--checkpoint", ckpt, "--metrics", p("cnn-np2.jsonl"))
    if ok_run("cnn, np 2, 2 epochs with --checkpoint", r):
        same_epochs("cnn np 2 vs one process", metrics(p("cnn-np2.jsonl")), single[:2])
        r = train(oxmera, *common, "--epochs", "3", "--resume", ckpt, "--metrics", p("cnn-resumed.jsonl"))
        if ok_run("cnn, np 2's checkpoint resumed by one process", r):
            same_epochs("cnn resumed vs one process", metrics(p("cnn-resumed.jsonl")), single[2:])


def lm(oxmera, mpiexec, p):
    for model in ("transformer", "lstm"):
        args = ["--model", model, "--steps-per-epoch", "5", "--batch", "8"]
        single = p(f"{model}-single.jsonl")
        if not ok_run(f"{model}: one process", train(oxmera, "--epochs", "3", "--metrics", single, *args)):
            continue
        r = mpi_train(mpiexec, 2, oxmera, "--epochs", "3", "--metrics", p(f"{model}-np2.jsonl"), *args)
        if not ok_run(f"{model}: np 2", r):
            continue
        check(f"{model} np 2: one line per epoch", len(EPOCH_LINE.findall(r.stdout)) == 3, r.stdout)
        same_epochs(f"{model} np 2 vs one process", metrics(p(f"{model}-np2.jsonl")), metrics(single))
        ckpt = p(f"{model}.safetensors")
        r = mpi_train(mpiexec, 2, oxmera, "--epochs", "2", "--checkpoint", ckpt, *args)
        if not ok_run(f"{model}: np 2 checkpoint", r):
            continue
        r = train(oxmera, "--epochs", "3", "--resume", ckpt, "--metrics", p(f"{model}-resumed.jsonl"), *args)
        if ok_run(f"{model}: np 2 checkpoint resumed in one process", r):
            same_epochs(f"{model} resumed vs one process", metrics(p(f"{model}-resumed.jsonl")),
                        metrics(single)[2:])


def no_launcher(oxmera, mpi_built):
    r = train(oxmera, "--distributed", "--epochs", "1")
    check("--distributed outside mpirun: exit 1", r.returncode == 1, r)
    if mpi_built:
        want = ["oxmera: error: [InvalidArgument] oxmera train --distributed: distributed::launch_environment: "
                "this process was not started by a launcher", "mpirun -np N"]
    else:
        want = ["oxmera: error: [BackendUnavailable] oxmera train --distributed: distributed::init: "
                "this oxmera was built without MPI"]
    check("--distributed outside mpirun: typed message", all(w in r.stderr for w in want), r.stderr)
    check("--distributed outside mpirun: nothing trained", "epoch" not in r.stdout, r.stdout)
    r = train(oxmera, "--distributed", "--tui", "--epochs", "1")
    check("--tui --distributed outside mpirun: exit 1", r.returncode == 1, r)
    check("--tui --distributed outside mpirun: the same typed message", all(w in r.stderr for w in want), r.stderr)
    check("--tui --distributed outside mpirun: the terminal untouched", r.stdout == "", r.stdout)


def main():
    oxmera, mode, work, mpiexec = sys.argv[1:5]
    mpi_built = mpiexec != "--no-mpi"
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    p = lambda name: os.path.join(work, name)  # noqa: E731
    if mode == "no-launcher":
        no_launcher(oxmera, mpi_built)
    elif not mpi_built:
        print("skipped: oxmera was built without MPI (OXMERA_MPI=OFF, or no MPI found)")
        return 77
    elif mode == "parity":
        parity(oxmera, mpiexec, p)
    elif mode == "resume":
        resume(oxmera, mpiexec, p)
        interrupted(oxmera, mpiexec, p)
    elif mode == "cnn":
        cnn(oxmera, mpiexec, p)
    elif mode == "lm":
        lm(oxmera, mpiexec, p)
    else:
        print(f"unknown mode {mode}")
        return 2
    if worst_rel:
        print(f"largest relative loss difference: {worst_rel:.3g}")
    print("FAILED" if failed else "all passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
