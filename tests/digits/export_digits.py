#!/usr/bin/python3
"""Exports scikit-learn's digits data set (1797 8x8 images, pixel values 0..16, labels 0..9) to WORKDIR as
IDX files (written here with struct, big-endian, as the MNIST format is) and as .npy files (numpy's np.save):

  digits-images-idx3-ubyte  u8  [1797, 8, 8]     digits-images.npy      uint8   [1797, 8, 8]
  digits-images-f32.idx     f32 [1797, 8, 8]     digits-images-f32.npy  float32 [1797, 8, 8]
  digits-labels-idx1-ubyte  u8  [1797]           digits-labels.npy      uint8   [1797]

and prints one line "pixel_sum=<int> label_sum=<int> label0=<int> n=<int>" for the readers' check.
Exits 77 (skipped, with the reason) when numpy or scikit-learn cannot be imported.

Usage: export_digits.py WORKDIR
"""
import os
import struct
import sys

try:
    import numpy as np
    from sklearn.datasets import load_digits
except ImportError as e:
    print(f"digits: skipped ({e}; Debian's python3-sklearn provides the data set)")
    sys.exit(77)


def write_idx(path, array, type_code):
    big_endian = {0x08: ">u1", 0x0D: ">f4"}[type_code]
    with open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, type_code, array.ndim))
        f.write(struct.pack(">" + "I" * array.ndim, *array.shape))
        f.write(np.ascontiguousarray(array, dtype=big_endian).tobytes())


def export(work):
    os.makedirs(work, exist_ok=True)
    digits = load_digits()
    images = digits.images  # float64 [1797, 8, 8], integral values 0..16
    assert images.shape == (1797, 8, 8) and images.min() >= 0 and images.max() <= 16, images.shape
    assert (images == np.round(images)).all()
    images_u8 = images.astype(np.uint8)
    labels_u8 = digits.target.astype(np.uint8)
    write_idx(os.path.join(work, "digits-images-idx3-ubyte"), images_u8, 0x08)
    write_idx(os.path.join(work, "digits-images-f32.idx"), images.astype(np.float32), 0x0D)
    write_idx(os.path.join(work, "digits-labels-idx1-ubyte"), labels_u8, 0x08)
    np.save(os.path.join(work, "digits-images.npy"), images_u8)
    np.save(os.path.join(work, "digits-images-f32.npy"), images.astype(np.float32))
    np.save(os.path.join(work, "digits-labels.npy"), labels_u8)
    return (f"pixel_sum={int(images_u8.astype(np.int64).sum())} label_sum={int(labels_u8.astype(np.int64).sum())} "
            f"label0={int(labels_u8[0])} n={len(labels_u8)}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(export(sys.argv[1]))
