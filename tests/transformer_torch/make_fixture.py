#!/usr/bin/python3
"""Writes the torch-made fixture tests/test_transformer.cpp loads without torch: torch 1.13's
nn.Transformer(8, 2, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=16, dropout=0, batch_first=True)
with random weights, its state_dict as is (tests/data/transformer/torch_transformer.safetensors) and one forward's
inputs and output (torch_transformer_io.safetensors: src, tgt, src_key_padding_mask (BOOL), out; the tgt_mask is
generate_square_subsequent_mask(4)).

Usage: /usr/bin/python3 tests/transformer_torch/make_fixture.py   (from the repository root)
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_transformer_parity import write_st  # noqa: E402

torch.manual_seed(15)
m = torch.nn.Transformer(8, 2, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=16, dropout=0.0,
                         batch_first=True)
with torch.no_grad():
    for p in m.parameters():
        p.copy_(torch.randn(p.shape) * 0.5)
src, tgt = torch.randn(2, 5, 8), torch.randn(2, 4, 8)
kpm = torch.tensor([[False, False, False, True, True], [False, False, False, False, False]])
out = m(src, tgt, tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(4), src_key_padding_mask=kpm)
d = os.path.join("tests", "data", "transformer")
os.makedirs(d, exist_ok=True)
write_st(os.path.join(d, "torch_transformer.safetensors"), {k: v.numpy() for k, v in m.state_dict().items()})
write_st(os.path.join(d, "torch_transformer_io.safetensors"),
         {"src": src.numpy(), "tgt": tgt.numpy(), "src_key_padding_mask": kpm.numpy(), "out": out.detach().numpy()})
print("wrote", d)
