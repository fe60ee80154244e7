// einsum: a spec table checked against explicit nested loops over all letter assignments (f64 and f32),
// gradcheck of the lowering, malformed specs, and the lowering of the attention-style benchmark spec.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {
using namespace oxt;

struct Case {
  std::string spec;
  std::vector<Shape> shapes;
  std::string ref_spec;  // letters-only explicit spec for the reference when spec uses '...' ("" = spec)
};

// The table: every spec the issue names plus diagonals, broadcasting, implicit outputs, 3+ operands, ellipsis.
const std::vector<Case>& table() {
  static const std::vector<Case> cases = {
      {"ij,jk->ik", {{3, 4}, {4, 5}}, ""},
      {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}, ""},
      {"rbhd,rdo->rbho", {{3, 4, 2, 5}, {3, 5, 6}}, ""},
      {"ij->ji", {{3, 4}}, ""},
      {"i,i->", {{5}, {5}}, ""},
      {"i,j->ij", {{3}, {4}}, ""},
      {"ii->i", {{4, 4}}, ""},
      {"ii->", {{4, 4}}, ""},
      {"ij,ij->ij", {{3, 4}, {3, 4}}, ""},
      {"ij,j->i", {{3, 4}, {4}}, ""},
      {"bi,bi->b", {{3, 5}, {3, 5}}, ""},
      {"ijk->kji", {{2, 3, 4}}, ""},
      {"ij,kl->ijkl", {{2, 3}, {4, 2}}, ""},
      {"ij->", {{3, 4}}, ""},
      {"ij->i", {{3, 4}}, ""},
      {"iij->ij", {{3, 3, 4}}, ""},
      {"iii->i", {{3, 3, 3}}, ""},
      {"ijj,jk->ik", {{2, 3, 3}, {3, 4}}, ""},
      {"ij,kj->ik", {{3, 4}, {5, 4}}, ""},               // B transposed
      {"ji,jk->ik", {{4, 3}, {4, 5}}, ""},               // A transposed
      {"ij,jk->ki", {{3, 4}, {4, 5}}, ""},               // permuted output
      {"abcd,cbe->ade", {{2, 3, 4, 5}, {4, 3, 6}}, ""},  // two contracted letters in mixed order
      {"bhqd,bhkd->bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}}, ""},
      // broadcasting of size-1 dims
      {"ij,jk->ik", {{3, 1}, {4, 5}}, ""},           // contracted letter broadcast
      {"bij,bjk->bik", {{1, 3, 4}, {2, 4, 5}}, ""},  // batch letter broadcast
      {"ij,ij->ij", {{3, 1}, {1, 4}}, ""},
      {"i,i->i", {{1}, {4}}, ""},
      {"bi,bi->b", {{1, 5}, {3, 1}}, ""},
      // implicit output
      {"ij,jk", {{3, 4}, {4, 5}}, ""},
      {"ii", {{3, 3}}, ""},
      {"ji", {{3, 4}}, ""},
      {"ba,ac", {{2, 3}, {3, 4}}, ""},
      {"i,i", {{4}, {4}}, ""},
      {"Ab,bC", {{2, 3}, {3, 4}}, ""},
      // three and more operands
      {"ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 5}}, ""},
      {"ij,jk,kl", {{2, 3}, {3, 4}, {4, 2}}, ""},
      {"bn,anm,bm->ba", {{2, 3}, {4, 3, 5}, {2, 5}}, ""},
      {"i,i,i->i", {{4}, {4}, {4}}, ""},
      {"ij,jk,kl,lm->im", {{2, 3}, {3, 2}, {2, 4}, {4, 3}}, ""},
      {"i,j,k->ijk", {{2}, {3}, {2}}, ""},
      // spaces, scalars, empty dims
      {" i j , j k -> i k ", {{3, 4}, {4, 5}}, ""},
      {",i->i", {{}, {3}}, ""},
      {"->", {{}}, ""},
      {"ij,jk->ik", {{2, 0}, {0, 3}}, ""},
      {"ij,jk->ik", {{0, 2}, {2, 3}}, ""},
      // ellipsis (reference written with letters)
      {"...ij,...jk->...ik", {{2, 3, 4}, {4, 5}}, "aij,jk->aik"},
      {"i...->i", {{3, 2, 4}}, "iab->i"},
      {"...ii->...i", {{2, 3, 3}}, "aii->ai"},
      {"b...,b...->...", {{2, 3}, {2, 1}}, "ba,ba->a"},
      {"...ij,...jk", {{2, 1, 3, 4}, {3, 4, 5}}, "abij,bjk->abik"},
      {"ij->...ji", {{3, 4}}, "ij->ji"},  // '...' standing for no dims (torch, NumPy)
  };
  return cases;
}

// Reference: parses a letters-only spec and sums the product over every assignment of all letters.
struct Ref {
  std::vector<double> values;
  Shape shape;
  int64_t k = 1;  // number of summed terms per output element
};
Ref reference(const std::string& spec_in, const std::vector<Tensor>& ops) {
  std::string spec;
  for (char c : spec_in)
    if (c != ' ') spec += c;
  const size_t arrow = spec.find("->");
  const std::string lhs = spec.substr(0, arrow);
  std::vector<std::string> terms(1);
  for (char c : lhs) {
    if (c == ',')
      terms.emplace_back();
    else
      terms.back() += c;
  }
  std::map<char, int64_t> size;
  std::map<char, int> count;
  for (size_t i = 0; i < terms.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d) {
      const char c = terms[i][d];
      size[c] = std::max(size.count(c) ? size[c] : 1, ops[i].size(static_cast<int64_t>(d)));
      if (ops[i].size(static_cast<int64_t>(d)) == 0) size[c] = 0;
      ++count[c];
    }
  std::string out;
  if (arrow != std::string::npos) {
    out = spec.substr(arrow + 2);
  } else {
    for (auto& [c, n] : count)
      if (n == 1) out += c;  // std::map orders by char: upper case first (ASCII), as NumPy
  }
  std::string all;
  for (auto& [c, s] : size) all += c;
  Ref r;
  for (char c : out) r.shape.push_back(size[c]);
  r.values.assign(static_cast<size_t>(r.shape.product()), 0.0);
  for (auto& [c, s] : size)
    if (out.find(c) == std::string::npos) r.k *= s;
  std::vector<std::vector<double>> vals;
  for (const Tensor& t : ops) vals.push_back(values(t));
  std::map<char, int64_t> at;
  for (char c : all) at[c] = 0;
  int64_t total = 1;
  for (auto& [c, s] : size) total *= s;
  for (int64_t it = 0; it < total; ++it) {
    int64_t rem = it;
    for (size_t q = all.size(); q-- > 0;) {
      at[all[q]] = rem % size[all[q]];
      rem /= size[all[q]];
    }
    double prod = 1.0;
    for (size_t i = 0; i < terms.size(); ++i) {
      int64_t flat = 0;
      for (size_t d = 0; d < terms[i].size(); ++d) {
        const int64_t n = ops[i].size(static_cast<int64_t>(d));
        flat = flat * n + (n == 1 ? 0 : at[terms[i][d]]);
      }
      prod *= vals[i][static_cast<size_t>(flat)];
    }
    int64_t o = 0;
    for (char c : out) o = o * size[c] + at[c];
    r.values[static_cast<size_t>(o)] += prod;
  }
  return r;
}

std::vector<Tensor> make_operands(const Case& c, DType dt, uint64_t seed) {
  std::vector<Tensor> ops;
  for (size_t i = 0; i < c.shapes.size(); ++i) ops.push_back(randn(c.shapes[i], seed + 17 * i, DType::F64).to(dt));
  return ops;
}

TEST(Einsum, TableMatchesNestedLoopsF64) {
  ASSERT_GE(table().size(), 25u);
  uint64_t seed = 1;
  for (const Case& c : table()) {
    auto ops = make_operands(c, DType::F64, seed++);
    Ref r = reference(c.ref_spec.empty() ? c.spec : c.ref_spec, ops);
    Tensor got = einsum(c.spec, ops);
    EXPECT_EQ(got.shape(), r.shape) << c.spec;
    EXPECT_EQ(got.dtype(), DType::F64) << c.spec;
    expect_close(values(got), r.values, 1e-12, 1e-12, c.spec);
  }
}

TEST(Einsum, TableF32WithinSqrtK) {
  uint64_t seed = 100;
  for (const Case& c : table()) {
    auto ops64 = make_operands(c, DType::F64, seed++);
    std::vector<Tensor> ops32;
    for (const Tensor& t : ops64) ops32.push_back(t.to(DType::F32));
    // Reference on the f32-rounded inputs, in f64.
    std::vector<Tensor> rounded;
    for (const Tensor& t : ops32) rounded.push_back(t.to(DType::F64));
    Ref r = reference(c.ref_spec.empty() ? c.spec : c.ref_spec, rounded);
    Tensor got = einsum(c.spec, ops32);
    EXPECT_EQ(got.dtype(), DType::F32) << c.spec;
    const double tol = 1e-5 * std::sqrt(static_cast<double>(std::max<int64_t>(r.k, 1)));
    expect_close(values(got), r.values, tol, tol, c.spec);
  }
}

TEST(Einsum, BenchmarkShapeF32WithinSqrtK) {
  // rbhd,rdo->rbho at the benchmark size, f32 against the f64 loops (k = d = 16).
  Tensor a = randn({3, 64, 16, 16}, 5), b = randn({3, 16, 16}, 6);
  Ref r = reference("rbhd,rdo->rbho", {a.to(DType::F64), b.to(DType::F64)});
  Tensor got = einsum("rbhd,rdo->rbho", {a, b});
  ASSERT_EQ(got.shape(), Shape({3, 64, 16, 16}));
  const double tol = 1e-5 * std::sqrt(16.0);
  expect_close(values(got), r.values, tol, tol, "rbhd,rdo->rbho f32");
}

TEST(Einsum, GradcheckF64) {
  uint64_t seed = 500;
  for (const Case& c : table()) {
    auto ops = make_operands(c, DType::F64, seed++);
    bool empty = false;
    for (auto& t : ops) {
      empty |= t.numel() == 0;
      t.requires_grad_(true);
    }
    if (empty) continue;
    GradcheckResult res = gradcheck([&](const std::vector<Tensor>& v) { return einsum(c.spec, v); }, ops);
    EXPECT_TRUE(res.ok) << c.spec << ": " << res.message;
  }
  // The benchmark spec at a moderate size, explicitly.
  Tensor a = randn({2, 3, 4, 5}, 7, DType::F64).requires_grad_(true);
  Tensor b = randn({2, 5, 3}, 8, DType::F64).requires_grad_(true);
  GradcheckResult res = gradcheck([](const std::vector<Tensor>& v) { return einsum("rbhd,rdo->rbho", v); }, {a, b});
  EXPECT_TRUE(res.ok) << res.message;
}

TEST(Einsum, GradientsFlowToEveryOperand) {
  Tensor a = randn({3, 4}, 1, DType::F64).requires_grad_(true);
  Tensor b = randn({4, 5}, 2, DType::F64).requires_grad_(true);
  einsum("ij,jk->", {a, b}).backward();
  // d/da sum_ik (ab)_ik = b.sum(1) broadcast over i; d/db = a.sum(0) broadcast over k.
  auto bs = values(b.sum({1})), as = values(a.sum({0}));
  auto ga = values(a.grad()), gb = values(b.grad());
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(ga[i * 4 + j], bs[j], 1e-12);
  for (int j = 0; j < 4; ++j)
    for (int k = 0; k < 5; ++k) EXPECT_NEAR(gb[j * 5 + k], as[j], 1e-12);
}

// Number of allocation requests made by f (system allocations + cache hits).
template <class F>
int64_t allocations(F&& f) {
  MemoryStats s0 = memory_stats();
  f();
  MemoryStats s1 = memory_stats();
  return (s1.system_allocations + s1.cache_hits) - (s0.system_allocations + s0.cache_hits);
}

TEST(Einsum, BenchmarkSpecIsOneBatchedMatmulWithoutCopies) {
  Tensor a = randn({3, 64, 16, 16}, 1), b = randn({3, 16, 16}, 2);
  NoGradGuard ng;
  Tensor out;
  // Only the output is allocated: A is viewed as [3, 1024, 16], B is used as is, out viewed as [3, 64, 16, 16].
  EXPECT_EQ(allocations([&] { out = einsum("rbhd,rdo->rbho", {a, b}); }), 1);
  EXPECT_EQ(out.shape(), Shape({3, 64, 16, 16}));
  EXPECT_TRUE(out.is_contiguous());
}

TEST(Einsum, TapeOfBenchmarkSpecIsMatmulThenView) {
  Tensor a = randn({3, 64, 16, 16}, 1).requires_grad_(true), b = randn({3, 16, 16}, 2).requires_grad_(true);
  Tensor out;
  EXPECT_EQ(allocations([&] { out = einsum("rbhd,rdo->rbho", {a, b}); }), 1);
  EXPECT_EQ(out.grad_fn_name(), "reshape");
  out.sum().backward();
  EXPECT_EQ(a.grad().shape(), a.shape());
  EXPECT_EQ(b.grad().shape(), b.shape());
}

TEST(Einsum, NoCopiesForTransposedOrBroadcastOperands) {
  NoGradGuard ng;
  Tensor a = randn({8, 16}, 1), b = randn({32, 16}, 2), c = randn({5, 8, 16}, 3), w = randn({16, 4}, 4);
  EXPECT_EQ(allocations([&] { (void)einsum("ij,kj->ik", {a, b}); }), 1);  // B^T as a column-major view
  Tensor b2 = randn({32, 4}, 9);
  EXPECT_EQ(allocations([&] { (void)einsum("ji,jk->ik", {b, b2}); }), 1);   // A^T likewise
  EXPECT_EQ(allocations([&] { (void)einsum("bij,jk->bik", {c, w}); }), 1);  // b folds into m
  Tensor c1 = randn({1, 8, 16}, 5), d = randn({6, 16, 4}, 6);
  Tensor out;
  EXPECT_EQ(allocations([&] { out = einsum("bij,bjk->bik", {c1, d}); }), 1);  // broadcast batch: stride 0
  EXPECT_EQ(out.shape(), Shape({6, 8, 4}));
  // Broadcast operand given as a stride-0 view stays a view.
  Tensor e = randn({16}, 7).broadcast_to({6, 16}), f = randn({6, 16}, 8);
  EXPECT_EQ(allocations([&] { (void)einsum("bj,bj->b", {e, f}); }), 1);
}

// An output that starts with the second operand's free letters: those become broadcast batch dims of one
// batched matmul, so the result is contiguous in the output's order (no permuted view, and a gradient that
// arrives contiguous needs no copy on its way back). The research workload's deepsets spec.
TEST(Einsum, LeadingFreeLettersOfTheSecondOperandBecomeBatch) {
  Tensor f = randn({64, 16, 5}, 1, DType::F64), a = randn({3, 5, 30}, 2, DType::F64).requires_grad_();
  Tensor out;
  EXPECT_EQ(allocations([&] { out = einsum("bid,rdh->rbih", {f, a}); }), 1);
  EXPECT_EQ(out.shape(), Shape({3, 64, 16, 30}));
  EXPECT_TRUE(out.is_contiguous());
  const Ref want = reference("bid,rdh->rbih", {f, a});
  expect_close(values(out), want.values, 1e-12, 1e-12, "bid,rdh->rbih");
  Tensor fs = f.narrow(0, 0, 2).detach().requires_grad_(), as = a.narrow(2, 0, 4).detach().requires_grad_();
  GradcheckResult res = gradcheck([](const std::vector<Tensor>& v) { return einsum("bid,rdh->rbih", v); }, {fs, as});
  EXPECT_TRUE(res.ok) << res.message;
  // An output listing the second operand's letters first ("ni,oi->on"): the operands swap, one GEMM writes
  // the result contiguous (not a permuted view of [n, o]); with few columns the batch rewrite stays off.
  Tensor u = randn({7, 5}, 5, DType::F64), v = randn({3, 5}, 6, DType::F64);
  Tensor uv;
  EXPECT_EQ(allocations([&] { uv = einsum("ni,oi->on", {u, v}); }), 1);
  EXPECT_TRUE(uv.is_contiguous());
  expect_close(values(uv), reference("ni,oi->on", {u, v}).values, 1e-12, 1e-12, "ni,oi->on");
  Tensor w3 = randn({2, 5, 3}, 7, DType::F64);
  expect_close(values(einsum("ni,bio->bon", {u, w3})), reference("ni,bio->bon", {u, w3}).values, 1e-12, 1e-12,
               "ni,bio->bon");
  // A broadcast batch letter of size 0 gives an empty result of the right shape.
  EXPECT_EQ(einsum("bid,rdh->rbih", {randn({2, 3, 4}, 3), randn({0, 4, 20}, 4)}).shape(), Shape({0, 2, 3, 20}));
  // Not applicable (the output order would differ): unchanged lowering, still correct.
  expect_close(values(einsum("bid,rdh->brih", {f, a})), values(out.permute({1, 0, 2, 3})), 1e-12, 1e-12,
               "bid,rdh->brih");
}

TEST(Einsum, ViewsAndSingleOperandForms) {
  Tensor a = randn({3, 4}, 1, DType::F64);
  Tensor t = einsum("ij->ji", {a});
  EXPECT_TRUE(t.shares_storage(a));  // a transpose is a view, as in torch
  EXPECT_EQ(t.shape(), Shape({4, 3}));
  Tensor sq = randn({4, 4}, 2, DType::F64);
  EXPECT_TRUE(einsum("ii->i", {sq}).shares_storage(sq));
  EXPECT_NEAR(einsum("ii->", {sq}).item<double>(), einsum("ii", {sq}).item<double>(), 0);
  EXPECT_EQ(einsum("ij->", {a}).dim(), 0);
  EXPECT_EQ(einsum("ij,jk", {a, randn({4, 2}, 3, DType::F64)}).shape(), Shape({3, 2}));
  EXPECT_EQ(einsum("ba", {a}).shape(), Shape({4, 3}));  // implicit: alphabetical order → transpose
}

TEST(Einsum, MalformedSpecsAreInvalidArgumentNamingLetterOrPosition) {
  Tensor m = randn({3, 4}, 1), v = randn({4}, 2), sq = randn({3, 3}, 3), c = randn({4, 5}, 4);
  // wrong number of operands
  EXPECT_OXM_ERROR(einsum("ij,jk->ik", {m}), InvalidArgument, "2 operand terms but 1 operand was given");
  EXPECT_OXM_ERROR(einsum("ij->ij", {m, c}), InvalidArgument, "1 operand term but 2 operands were given");
  EXPECT_OXM_ERROR(einsum("ij", {}), InvalidArgument, "1 operand term but 0 operands");
  // letter count vs rank
  EXPECT_OXM_ERROR(einsum("ijk,jk->i", {m, c}), InvalidArgument, "operand 0 has rank 2");
  EXPECT_OXM_ERROR(einsum("ijk,jk->i", {m, c}), InvalidArgument, "'ijk'");
  EXPECT_OXM_ERROR(einsum("ij,j->i", {m, m}), InvalidArgument, "operand 1 has rank 2");
  EXPECT_OXM_ERROR(einsum("ijk...->i", {m}), InvalidArgument, "name 3 dims besides '...'");
  // invalid characters, with their position
  EXPECT_OXM_ERROR(einsum("i1,jk->ik", {m, c}), InvalidArgument, "invalid character '1' at position 1");
  EXPECT_OXM_ERROR(einsum("ij,jk=>ik", {m, c}), InvalidArgument, "invalid character '=' at position 5");
  EXPECT_OXM_ERROR(einsum("ij,jk-ik", {m, c}), InvalidArgument, "invalid character '-' at position 5");
  EXPECT_OXM_ERROR(einsum("ij,jk>ik", {m, c}), InvalidArgument, "invalid character '>' at position 5");
  EXPECT_OXM_ERROR(einsum("ij,j_->i", {m, c}), InvalidArgument, "'_' at position 4");
  EXPECT_OXM_ERROR(einsum("i.j->i", {m}), InvalidArgument, "'.' at position 1");
  EXPECT_OXM_ERROR(einsum("..i.j->i", {m}), InvalidArgument, "'.' at position 0");
  EXPECT_OXM_ERROR(einsum("...i...->i", {m}), InvalidArgument, "'...' appears twice");
  // output letter not in any input, repeated output letter
  EXPECT_OXM_ERROR(einsum("ij,jk->iz", {m, c}), InvalidArgument, "output letter 'z' at position 8");
  EXPECT_OXM_ERROR(einsum("ij,jk->ii", {m, c}), InvalidArgument, "output letter 'i' appears twice");
  EXPECT_OXM_ERROR(einsum("ij,jk->ii", {m, c}), InvalidArgument, "positions 7 and 8");
  // size conflicts: the letter and both sizes
  EXPECT_OXM_ERROR(einsum("ij,jk->ik", {m, randn({5, 2}, 5)}), InvalidArgument, "letter 'j' has size 4");
  EXPECT_OXM_ERROR(einsum("ij,jk->ik", {m, randn({5, 2}, 5)}), InvalidArgument, "size 5 in operand 1");
  EXPECT_OXM_ERROR(einsum("ij,ij->ij", {m, randn({3, 5}, 5)}), InvalidArgument, "letter 'j'");
  EXPECT_OXM_ERROR(einsum("ii->i", {m}), InvalidArgument, "letter 'i' is repeated in operand 0 with sizes 3 and 4");
  EXPECT_OXM_ERROR(einsum("ij,ij,ij->", {m, m, randn({2, 4}, 6)}), InvalidArgument, "size 2 in operand 2");
  // '->' twice, ',' in the output
  EXPECT_OXM_ERROR(einsum("ij->ji->ij", {m}), InvalidArgument, "'->' appears twice");
  EXPECT_OXM_ERROR(einsum("ij->ji->ij", {m}), InvalidArgument, "positions 2 and 6");
  EXPECT_OXM_ERROR(einsum("ij,jk->i,k", {m, c}), InvalidArgument, "',' at position 8");
  // Kind checks for the table-driven form
  EXPECT_EQ(error_kind_of([&] { einsum("ii", {sq, v}); }), ErrorKind::InvalidArgument);
  EXPECT_EQ(error_kind_of([&] { einsum("ij,jk->ik", {m, Tensor()}); }), ErrorKind::InvalidArgument);
}

TEST(Einsum, DTypeAndDeviceMismatchAsOtherOps) {
  Tensor a = randn({3, 4}, 1), b = randn({4, 5}, 2, DType::F64);
  EXPECT_OXM_ERROR(einsum("ij,jk->ik", {a, b}), DTypeMismatch, "einsum: operands have dtypes f32");
  EXPECT_OXM_ERROR(einsum("ij,jk->ik", {a, b}), DTypeMismatch, "operand 1");
  EXPECT_EQ(error_kind_of([&] { matmul(a, b); }), ErrorKind::DTypeMismatch);  // same kind as matmul
}

}  // namespace
