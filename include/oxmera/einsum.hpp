#pragma once
// Einstein summation over one, two or more operands, lowered onto differentiable ops (no autograd rule of its own).
#include <string>
#include <vector>

#include "oxmera/tensor.hpp"

namespace oxmera {

// einsum("ij,jk->ik", {a, b}) and friends, with torch/NumPy semantics:
// - Subscripts are the letters a-z and A-Z, one term per operand separated by ','; spaces are ignored.
// - Explicit output after "->", or implicit output (NumPy rule): the letters that appear exactly once over all
//   inputs, in ASCII order (upper case first). An empty output ("ij->") is a full contraction to a 0-d tensor.
// - A letter repeated within one operand takes that operand's diagonal ("ii->i", "ii->" is the trace,
//   "iij->ij"); its sizes there must be equal. Letters absent from the output are summed.
// - Size-1 dims broadcast against the same letter's size in other operands (torch rule).
// - Ellipsis: "..." (at most once per term) stands for the dims not named by letters, right-aligned and
//   broadcast across operands like NumPy. Implicit output puts the ellipsis dims first; an explicit output
//   without "..." sums them, an output "..." with none in the inputs stands for no dims (both as torch).
// - More than two operands are contracted pairwise, left to right (no contraction-order optimisation).
// Lowering: per operand, diagonal() views for repeated letters; per pair (left to right), sum() of letters that
// only one side has and nothing later needs, then ONE batched matmul: letters in both inputs and needed later
// (output or a later operand) → batch dims, in both and not needed later → k, only in A → m, only in B → n,
// each side brought to [batch..., M, K] / [batch..., K, N] by permute + reshape (a view whenever the strides
// allow; a transposed side stays a column-major view); when no letter is contracted a broadcast multiply
// replaces the 1×1-inner matmul. Size-1 dims against size n: a kept letter is a stride-0 broadcast batch dim of
// matmul/mul, a contracted one is squeezed from the size-1 side. Broadcasts are never materialised.
// Finally sum() of letters not in the output and one permute. The result may be a view of an operand
// ("ij->ji", "ii->i"), as in torch. Example: "rbhd,rdo->rbho" is matmul([r, b·h, d] view, [r, d, o] as is)
// followed by a view to [r, b, h, o] — one batched GEMM, no copy of either operand.
// Errors (InvalidArgument, naming the letter and/or its position in spec): wrong number of operands, a term whose
// letter count does not match its operand's rank, invalid characters, an output letter in no input, a repeated
// output letter, conflicting sizes for one letter (naming both sizes and operands), "->" twice, a misplaced '.'.
// Operands must share dtype (DTypeMismatch) and device (DeviceMismatch); contractions need f32/f64.
Tensor einsum(const std::string& spec, const std::vector<Tensor>& operands);

}  // namespace oxmera
