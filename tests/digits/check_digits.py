#!/usr/bin/python3
"""ctest `digits_cnn`: scikit-learn's digits exported to IDX and .npy (export_digits.py), read back by both of
oxmera's readers (digits_readers), then the digits_cnn example trained on the IDX files must reach >= 95 % test
accuracy (its fixed seed and split) and its saved-and-reloaded model must score the same (the example checks it).
Exits 77 (skipped, with the reason) when numpy or scikit-learn cannot be imported.

Usage: check_digits.py PATH/TO/digits_cnn PATH/TO/digits_readers WORKDIR
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import export_digits  # noqa: E402  (exits 77 itself when numpy or sklearn is missing)


def main():
    example, readers, work = sys.argv[1], sys.argv[2], sys.argv[3]
    sums = export_digits.export(work)
    print(f"exported to {work}: {sums}")
    fields = dict(kv.split("=") for kv in sums.split())
    subprocess.run([readers, work, fields["pixel_sum"], fields["label_sum"], fields["label0"], fields["n"]],
                   check=True)
    run = subprocess.run([example, "--data", work, "--model", os.path.join(work, "digits_cnn.safetensors"),
                          "--workers", "2", "--min-accuracy", "0.95"], stdout=subprocess.PIPE, text=True)
    print(run.stdout, end="")
    m = re.search(r"^test accuracy ([0-9.]+)", run.stdout, re.M)
    if run.returncode != 0 or m is None or float(m.group(1)) < 0.95:
        print(f"FAIL digits_cnn exited {run.returncode}; test accuracy {m.group(1) if m else 'not printed'}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
