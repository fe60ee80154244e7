// einsum: parses the spec, then lowers it onto differentiable views, sum, matmul and mul (see einsum.hpp).
#include "oxmera/einsum.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace oxmera {
namespace {

// Labels: letters are their ASCII code; the dims of "..." are kEll + j (j = 0 is the leftmost ellipsis dim).
constexpr int kEll = 256;
using Labels = std::vector<int>;

struct Term {
  Labels labels;              // letters as written ("..." not expanded)
  std::vector<size_t> pos;    // spec position of each letter
  int ellipsis_at = -1;       // index in `labels` where "..." stands, -1 when absent
  size_t ellipsis_pos = 0;    // spec position of "..."
  size_t begin = 0, end = 0;  // the term's text in spec
};

struct Parsed {
  std::vector<Term> inputs;
  bool explicit_output = false;
  Term output;
};

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string char_desc(char c) {
  if (std::isprint(static_cast<unsigned char>(c))) return std::string("'") + c + "'";
  return detail::concat("byte 0x", std::hex, static_cast<int>(static_cast<unsigned char>(c)));
}

std::string label_name(int l) {
  if (l < kEll) return detail::concat("letter '", static_cast<char>(l), "'");
  return detail::concat("ellipsis dim ", l - kEll);
}

Parsed parse(const std::string& spec) {
  Parsed p;
  p.inputs.emplace_back();
  Term* cur = &p.inputs.back();
  size_t arrow_pos = 0;
  for (size_t i = 0; i < spec.size(); ++i) {
    const char c = spec[i];
    if (c == ' ') continue;
    if (is_letter(c)) {
      if (cur->labels.empty() && cur->ellipsis_at < 0) cur->begin = i;
      cur->labels.push_back(c);
      cur->pos.push_back(i);
      cur->end = i + 1;
    } else if (c == ',') {
      OXM_CHECK(!p.explicit_output, InvalidArgument, "einsum: ',' at position ", i, " of '", spec,
                "' is in the output (after '->' at position ", arrow_pos, ")");
      p.inputs.emplace_back();
      cur = &p.inputs.back();
    } else if (c == '-' && i + 1 < spec.size() && spec[i + 1] == '>') {
      OXM_CHECK(!p.explicit_output, InvalidArgument, "einsum: '->' appears twice in '", spec, "' (positions ",
                arrow_pos, " and ", i, ")");
      p.explicit_output = true;
      arrow_pos = i;
      cur = &p.output;
      ++i;
    } else if (c == '.') {
      OXM_CHECK(spec.compare(i, 3, "...") == 0, InvalidArgument, "einsum: '.' at position ", i, " of '", spec,
                "' is not part of an ellipsis '...'");
      OXM_CHECK(cur->ellipsis_at < 0, InvalidArgument, "einsum: '...' appears twice in one term of '", spec,
                "' (positions ", cur->ellipsis_pos, " and ", i, ")");
      if (cur->labels.empty()) cur->begin = i;
      cur->ellipsis_at = static_cast<int>(cur->labels.size());
      cur->ellipsis_pos = i;
      i += 2;
      cur->end = i + 1;
    } else {
      OXM_FAIL(InvalidArgument, "einsum: invalid character ", char_desc(c), " at position ", i, " of '", spec,
               "' (subscripts are letters a-z, A-Z, with ',', '->', '...' and spaces)");
    }
  }
  return p;
}

// Dims [b, e) of t can be merged into one by a view (size-1 dims never matter).
bool mergeable(const Tensor& t, size_t b, size_t e) {
  int64_t prev = -1;
  for (size_t d = b; d < e; ++d) {
    if (t.size(static_cast<int64_t>(d)) == 1) continue;
    if (prev >= 0 && t.stride(prev) != t.stride(static_cast<int64_t>(d)) * t.size(static_cast<int64_t>(d)))
      return false;
    prev = static_cast<int64_t>(d);
  }
  return true;
}

// Stride of the innermost non-size-1 dim in [b, e) (1 when all are size 1).
int64_t inner_stride(const Tensor& t, size_t b, size_t e) {
  for (size_t d = e; d-- > b;)
    if (t.size(static_cast<int64_t>(d)) != 1) return t.stride(static_cast<int64_t>(d));
  return 1;
}

int64_t index_of(const Labels& v, int l) {
  auto it = std::find(v.begin(), v.end(), l);
  return it == v.end() ? -1 : static_cast<int64_t>(it - v.begin());
}
bool contains(const Labels& v, int l) { return index_of(v, l) >= 0; }

// Sums the dims whose label satisfies pred.
template <class Pred>
void sum_out(Tensor& t, Labels& labels, Pred pred) {
  Dims dims;
  Labels rest;
  for (size_t d = 0; d < labels.size(); ++d) {
    if (pred(labels[d]))
      dims.push_back(static_cast<int64_t>(d));
    else
      rest.push_back(labels[d]);
  }
  if (dims.empty()) return;
  t = t.sum(dims, false);
  labels = std::move(rest);
}

Dims perm_of(const Labels& from, const std::vector<const Labels*>& groups) {
  Dims perm;
  for (const Labels* g : groups)
    for (int l : *g) perm.push_back(index_of(from, l));
  return perm;
}

bool is_identity(const Dims& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

Tensor permuted(const Tensor& t, const Dims& perm) { return is_identity(perm) ? t : t.permute(perm); }

int64_t product(const Labels& ls, const Tensor& t, const Labels& tl) {
  int64_t p = 1;
  for (int l : ls) p *= t.size(index_of(tl, l));
  return p;
}

// Brings t (labels tl) into [batch..., X, Y] with X = prod(first), Y = prod(second) as a matrix for matmul. Uses
// the order [batch, second, first] plus a transpose when that lets the groups merge as views and the first
// order does not (e.g. a transposed operand).
Tensor as_matrix(const Tensor& t, const Labels& tl, const Labels& batch, const Labels& first, const Labels& second) {
  Shape shape;
  for (int l : batch) shape.push_back(t.size(index_of(tl, l)));
  shape.push_back(product(first, t, tl));
  shape.push_back(product(second, t, tl));
  const size_t nb = batch.size(), nf = first.size(), ns = second.size();
  auto score = [&](const Tensor& p, size_t n1, size_t n2) {
    bool m1 = mergeable(p, nb, nb + n1), m2 = mergeable(p, nb + n1, nb + n1 + n2);
    bool gemm = inner_stride(p, nb + n1, nb + n1 + n2) == 1 || inner_stride(p, nb, nb + n1) == 1;
    return (m1 && m2 ? 2 : 0) + (gemm ? 1 : 0);
  };
  Tensor normal = permuted(t, perm_of(tl, {&batch, &first, &second}));
  const int s_normal = score(normal, nf, ns);
  if (s_normal < 3) {
    Tensor swapped = permuted(t, perm_of(tl, {&batch, &second, &first}));
    if (score(swapped, ns, nf) > s_normal) {
      Shape sw = shape;
      std::swap(sw[nb], sw[nb + 1]);
      return swapped.reshape(sw).transpose(-1, -2);
    }
  }
  return normal.reshape(shape);
}

// Contracts a (labels la) with b (labels lb), keeping the labels for which keep[l] is true. `want` (the last
// contraction only): the output order; when it begins with free labels of b, those become broadcast batch
// dims of the product (a gets size-1 dims for them) if that yields `want` exactly and b keeps at least 16
// columns per batch entry, so the result needs no final permute and stays contiguous (e.g. "bid,rdh->rbih":
// R GEMMs against one broadcast F, not one GEMM followed by a permuted [b, i, r, h] view whose consumers and
// gradients run strided).
std::pair<Tensor, Labels> contract(Tensor a, Labels la, Tensor b, Labels lb, const std::vector<char>& keep,
                                   const Labels* want = nullptr) {
  // A letter in both with sizes 1 and n: kept, it is a broadcast batch dim (stride 0 in matmul / mul); contracted,
  // the size-1 side does not depend on it, so it is squeezed there and the other side sums it.
  for (size_t d = la.size(); d-- > 0;) {
    const int64_t j = index_of(lb, la[d]);
    if (j < 0 || keep[la[d]] || a.size(static_cast<int64_t>(d)) == b.size(j)) continue;
    if (a.size(static_cast<int64_t>(d)) == 1) {
      a = a.squeeze(static_cast<int64_t>(d));
      la.erase(la.begin() + static_cast<std::ptrdiff_t>(d));
    } else {
      b = b.squeeze(j);
      lb.erase(lb.begin() + static_cast<std::ptrdiff_t>(j));
    }
  }
  sum_out(a, la, [&](int l) { return !keep[l] && !contains(lb, l); });
  sum_out(b, lb, [&](int l) { return !keep[l] && !contains(la, l); });
  // The product's label order: batch (in x's order), x's free labels, y's free labels.
  auto order_of = [&](const Labels& lx, const Labels& ly) {
    Labels o;
    for (int l : lx)
      if (contains(ly, l) && keep[l]) o.push_back(l);
    for (int l : lx)
      if (!contains(ly, l)) o.push_back(l);
    for (int l : ly)
      if (!contains(lx, l)) o.push_back(l);
    return o;
  };
  // An output that lists b's free labels before a's ("ni,oi->on"): contract b with a, so one GEMM writes it
  // contiguous in that order instead of a permuted view of [n, o].
  if (want != nullptr && order_of(la, lb) != *want && order_of(lb, la) == *want) {
    std::swap(a, b);
    std::swap(la, lb);
  }
  if (want != nullptr) {
    size_t p = 0;  // want[0, p): free labels of b
    while (p < want->size() && contains(lb, (*want)[p]) && !contains(la, (*want)[p])) ++p;
    if (p > 0 && p < want->size()) {
      Labels la2(want->begin(), want->begin() + static_cast<std::ptrdiff_t>(p));
      la2.insert(la2.end(), la.begin(), la.end());
      const Labels order = order_of(la2, lb);  // the order the product would then have
      // Worth it only while each batch entry stays a real matrix product: with few columns left in b (say
      // "ni,oi->on", one column), R matrix-vector products are far slower than one GEMM and a permute.
      int64_t cols = 1;
      for (int l : lb)
        if (!contains(la2, l)) cols *= b.size(index_of(lb, l));
      if (order == *want && order_of(la, lb) != *want && cols >= 16) {
        for (size_t i = 0; i < p; ++i) a = a.unsqueeze(0);
        la = std::move(la2);
      }
    }
  }
  Labels batch, k, m, n;
  for (int l : la) {
    if (!contains(lb, l))
      m.push_back(l);
    else if (keep[l])
      batch.push_back(l);
    else
      k.push_back(l);
  }
  for (int l : lb)
    if (!contains(la, l)) n.push_back(l);
  Labels out_labels = batch;
  out_labels.insert(out_labels.end(), m.begin(), m.end());
  out_labels.insert(out_labels.end(), n.begin(), n.end());
  if (k.empty()) {
    // Nothing to contract: a broadcast multiply [batch, m, 1...] * [batch, 1..., n] (no 1x1 GEMMs).
    Tensor at = permuted(a, perm_of(la, {&batch, &m}));
    Tensor bt = permuted(b, perm_of(lb, {&batch, &n}));
    Shape as = at.shape(), bs = bt.shape();
    for (size_t i = 0; i < n.size(); ++i) as.push_back(1);
    for (size_t i = 0; i < m.size(); ++i) bs.insert(batch.size(), 1);
    if (!n.empty()) at = at.reshape(as);
    if (!m.empty()) bt = bt.reshape(bs);
    return {at * bt, out_labels};
  }
  Tensor am = as_matrix(a, la, batch, m, k);
  Tensor bm = as_matrix(b, lb, batch, k, n);
  Tensor out = matmul(am, bm);  // [batch..., M, N]
  Shape os;
  for (int l : batch) {  // broadcast: a size-1 side takes the other's size, including 0
    const int64_t sa = a.size(index_of(la, l)), sb = b.size(index_of(lb, l));
    os.push_back(sa == 1 ? sb : sa);
  }
  for (int l : m) os.push_back(a.size(index_of(la, l)));
  for (int l : n) os.push_back(b.size(index_of(lb, l)));
  if (os != out.shape()) out = out.reshape(os);
  return {out, out_labels};
}

}  // namespace

Tensor einsum(const std::string& spec, const std::vector<Tensor>& operands) {
  Parsed p = parse(spec);
  const size_t nops = operands.size();
  OXM_CHECK(p.inputs.size() == nops, InvalidArgument, "einsum: spec '", spec, "' has ", p.inputs.size(),
            " operand term", p.inputs.size() == 1 ? "" : "s", " but ", nops, " operand", nops == 1 ? " was" : "s were",
            " given");
  for (size_t i = 0; i < nops; ++i) {
    OXM_CHECK(operands[i].defined(), InvalidArgument, "einsum: operand ", i, " is an undefined tensor");
    OXM_CHECK(operands[i].dtype() == operands[0].dtype(), DTypeMismatch, "einsum: operands have dtypes ",
              operands[0].dtype(), " (operand 0) and ", operands[i].dtype(), " (operand ", i,
              "); cast one with .to(DType)");
    OXM_CHECK(operands[i].device() == operands[0].device(), DeviceMismatch, "einsum: operands are on ",
              operands[0].device(), " (operand 0) and ", operands[i].device(), " (operand ", i, ")");
  }

  // Ranks, ellipsis expansion.
  int64_t n_ell = 0;
  std::vector<int64_t> ell_dims(nops, 0);
  for (size_t i = 0; i < nops; ++i) {
    const Term& t = p.inputs[i];
    const int64_t rank = operands[i].dim(), named = static_cast<int64_t>(t.labels.size());
    const std::string text = spec.substr(t.begin, t.end - t.begin);
    if (t.ellipsis_at < 0) {
      OXM_CHECK(named == rank, InvalidArgument, "einsum: operand ", i, " has rank ", rank, " (shape ",
                operands[i].shape(), ") but its subscripts '", text, "' (at position ", t.begin, ") name ", named,
                " dim", named == 1 ? "" : "s");
    } else {
      OXM_CHECK(named <= rank, InvalidArgument, "einsum: operand ", i, " has rank ", rank, " (shape ",
                operands[i].shape(), ") but its subscripts '", text, "' (at position ", t.begin, ") name ", named,
                " dims besides '...'");
      ell_dims[i] = rank - named;
      n_ell = std::max(n_ell, ell_dims[i]);
    }
  }
  std::vector<Labels> labels(nops);
  for (size_t i = 0; i < nops; ++i) {
    const Term& t = p.inputs[i];
    for (size_t j = 0; j <= t.labels.size(); ++j) {
      if (static_cast<int>(j) == t.ellipsis_at)
        for (int64_t e = 0; e < ell_dims[i]; ++e) labels[i].push_back(kEll + static_cast<int>(n_ell - ell_dims[i] + e));
      if (j < t.labels.size()) labels[i].push_back(t.labels[j]);
    }
  }

  // Output labels.
  std::vector<int> count(kEll + n_ell + 1, 0);
  for (const Labels& ls : labels)
    for (int l : ls) ++count[l];
  Labels out;
  if (p.explicit_output) {
    const Term& t = p.output;
    for (size_t j = 0; j <= t.labels.size(); ++j) {
      if (static_cast<int>(j) == t.ellipsis_at)
        for (int64_t e = 0; e < n_ell; ++e) out.push_back(kEll + static_cast<int>(e));
      if (j == t.labels.size()) break;
      const int l = t.labels[j];
      OXM_CHECK(count[l] > 0, InvalidArgument, "einsum: output letter '", static_cast<char>(l), "' at position ",
                t.pos[j], " of '", spec, "' does not appear in any input");
      for (size_t q = 0; q < j; ++q)
        OXM_CHECK(t.labels[q] != l, InvalidArgument, "einsum: output letter '", static_cast<char>(l),
                  "' appears twice in the output of '", spec, "' (positions ", t.pos[q], " and ", t.pos[j], ")");
      out.push_back(l);
    }
  } else {
    for (int64_t e = 0; e < n_ell; ++e) out.push_back(kEll + static_cast<int>(e));
    for (int l = 0; l < kEll; ++l)
      if (count[l] == 1) out.push_back(l);
  }

  // Sizes: size-1 dims broadcast; a letter repeated within one operand needs equal sizes (diagonal).
  std::vector<int64_t> size(count.size(), 1);
  std::vector<int64_t> size_from(count.size(), -1);
  for (size_t i = 0; i < nops; ++i) {
    for (size_t d = 0; d < labels[i].size(); ++d) {
      const int l = labels[i][d];
      const int64_t s = operands[i].size(static_cast<int64_t>(d));
      for (size_t q = 0; q < d; ++q)
        OXM_CHECK(labels[i][q] != l || operands[i].size(static_cast<int64_t>(q)) == s, InvalidArgument,
                  "einsum: ", label_name(l), " is repeated in operand ", i, " with sizes ",
                  operands[i].size(static_cast<int64_t>(q)), " and ", s, " (shape ", operands[i].shape(),
                  "); a diagonal needs equal sizes");
      if (s == 1) continue;
      if (size_from[l] < 0) {
        size[l] = s;
        size_from[l] = static_cast<int64_t>(i);
      } else {
        OXM_CHECK(size[l] == s, InvalidArgument, "einsum: ", label_name(l), " has size ", size[l], " in operand ",
                  size_from[l], " and size ", s, " in operand ", i, " (spec '", spec, "')");
      }
    }
  }

  // Per operand: diagonals of repeated letters.
  std::vector<Tensor> ts(operands.begin(), operands.end());
  for (size_t i = 0; i < nops; ++i) {
    Tensor& t = ts[i];
    Labels& ls = labels[i];
    for (bool again = true; again;) {
      again = false;
      for (size_t a = 0; a < ls.size() && !again; ++a)
        for (size_t b = a + 1; b < ls.size() && !again; ++b)
          if (ls[a] == ls[b]) {
            const int l = ls[a];
            t = t.diagonal(0, static_cast<int64_t>(a), static_cast<int64_t>(b));
            ls.erase(ls.begin() + static_cast<std::ptrdiff_t>(b));
            ls.erase(ls.begin() + static_cast<std::ptrdiff_t>(a));
            ls.push_back(l);
            again = true;
          }
    }
  }

  // Pairwise contraction, left to right; a label is kept while the output or a later operand needs it.
  std::vector<char> in_out(count.size(), 0);
  for (int l : out) in_out[l] = 1;
  Tensor cur = ts[0];
  Labels cl = labels[0];
  for (size_t i = 1; i < nops; ++i) {
    std::vector<char> keep = in_out;
    for (size_t j = i + 1; j < nops; ++j)
      for (int l : labels[j]) keep[l] = 1;
    std::tie(cur, cl) = contract(cur, cl, ts[i], labels[i], keep, i + 1 == nops ? &out : nullptr);
  }
  sum_out(cur, cl, [&](int l) { return !in_out[l]; });
  Dims perm;
  for (int l : out) perm.push_back(index_of(cl, l));
  return permuted(cur, perm);
}

}  // namespace oxmera
