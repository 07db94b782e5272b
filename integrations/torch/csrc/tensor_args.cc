// Torch-to-Chorus argument conversion and checks (tensor_args.h).
#include "tensor_args.h"

namespace chorus_torch {

[[noreturn]] void fail(const std::string& what, int rc) {
  TORCH_CHECK(false, "chorus: ", what, ": ", chorus_status_name(rc), ": ", chorus_last_error());
}

int to_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kBool:
      return CHORUS_BOOL;
    case at::kChar:
      return CHORUS_INT8;
    case at::kShort:
      return CHORUS_INT16;
    case at::kInt:
      return CHORUS_INT32;
    case at::kLong:
      return CHORUS_INT64;
    case at::kByte:
      return CHORUS_UINT8;
    case at::kHalf:
      return CHORUS_FLOAT16;
    case at::kBFloat16:
      return CHORUS_BFLOAT16;
    case at::kFloat:
      return CHORUS_FLOAT32;
    case at::kDouble:
      return CHORUS_FLOAT64;
    case at::kComplexFloat:
      return CHORUS_COMPLEX64;
    default:
      TORCH_CHECK(false, "chorus: unsupported tensor dtype ", t.scalar_type(),
                  " (supported: bool, int8/16/32/64, uint8, float16, bfloat16, float32, "
                  "float64, complex64)");
  }
}

bool is_bitwise(const c10d::ReduceOp& op) {
  return op.op_ == c10d::ReduceOp::BAND || op.op_ == c10d::ReduceOp::BOR ||
         op.op_ == c10d::ReduceOp::BXOR;
}

int to_op(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return CHORUS_SUM;
    case c10d::ReduceOp::PRODUCT:
      return CHORUS_PROD;
    case c10d::ReduceOp::MIN:
      return CHORUS_MIN;
    case c10d::ReduceOp::MAX:
      return CHORUS_MAX;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(false, "chorus: cannot use ReduceOp.AVG (as with gloo); use SUM and divide");
    default:
      TORCH_CHECK(false,
                  "chorus: unsupported reduce op (SUM, PRODUCT, MIN, MAX, BAND, BOR, "
                  "BXOR are supported)");
  }
}

void check_bitwise_dtype(const at::Tensor& t) {
  TORCH_CHECK(!at::isFloatingType(t.scalar_type()) && !at::isComplexType(t.scalar_type()),
              "chorus: bitwise reduce ops need an integer or bool tensor, got ", t.scalar_type());
}

at::Tensor fold_bitwise(const at::Tensor& flat, int n, const c10d::ReduceOp& op) {
  auto blocks = flat.view({n, flat.numel() / n});
  at::Tensor acc = blocks[0].clone();
  for (int r = 1; r < n; ++r) {
    if (op.op_ == c10d::ReduceOp::BAND)
      acc.bitwise_and_(blocks[r]);
    else if (op.op_ == c10d::ReduceOp::BOR)
      acc.bitwise_or_(blocks[r]);
    else
      acc.bitwise_xor_(blocks[r]);
  }
  return acc;
}

void check_cpu(const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu(), "chorus: only CPU tensors are supported, got ", t.device());
}

at::Tensor staged(const at::Tensor& t, Issue& is, bool output) {
  check_cpu(t);
  if (t.is_contiguous()) return t;
  at::Tensor c = t.contiguous();
  if (output) is.post.push_back([t, c]() mutable { t.copy_(c); });
  return c;
}

c10::IValue tensor_list(const std::vector<at::Tensor>& ts) {
  return c10::IValue(c10::List<at::Tensor>(ts));
}

c10::IValue tensor_lists(const std::vector<std::vector<at::Tensor>>& ts) {
  c10::List<c10::List<at::Tensor>> l;
  for (auto& v : ts) l.push_back(c10::List<at::Tensor>(v));
  return c10::IValue(l);
}

void check_same(const std::vector<at::Tensor>& ts, const at::Tensor& ref, const char* op,
                const char* what) {
  for (size_t i = 0; i < ts.size(); ++i) {
    check_cpu(ts[i]);
    TORCH_CHECK(ts[i].scalar_type() == ref.scalar_type(), "chorus: ", op, ": ", what, "[", i,
                "] has dtype ", ts[i].scalar_type(), ", expected ", ref.scalar_type());
    TORCH_CHECK(ts[i].numel() == ref.numel(), "chorus: ", op, ": ", what, "[", i, "] has ",
                ts[i].numel(), " elements, expected ", ref.numel());
  }
}

void check_root(int64_t root, int size, const char* op) {
  TORCH_CHECK(root >= 0 && root < size, "chorus: ", op, ": invalid root rank ", root,
              " (group size ", size, ")");
}

}  // namespace chorus_torch
