// Turning torch arguments into Chorus ones: dtypes and reduce ops, the
// bitwise ops Chorus lacks (folded here in rank order), argument checks with
// gloo-like messages, contiguous staging of tensors, and the IValues a Work's
// future completes with. Definitions in tensor_args.cc.
#pragma once

#include "chorus_work.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace chorus_torch {

[[noreturn]] void fail(const std::string& what, int rc);

int to_dtype(const at::Tensor& t);

bool is_bitwise(const c10d::ReduceOp& op);

/// Chorus op for SUM/PRODUCT/MIN/MAX. The library has no bitwise ops: the
/// callers all-gather (allreduce) or gather (reduce) and fold the blocks in
/// rank order; AVG and
/// PREMUL_SUM are rejected as gloo rejects them.
int to_op(const c10d::ReduceOp& op);

void check_bitwise_dtype(const at::Tensor& t);

/// result = fold of the `n` blocks of `flat` (rank order) with a bitwise op.
at::Tensor fold_bitwise(const at::Tensor& flat, int n, const c10d::ReduceOp& op);

void check_cpu(const at::Tensor& t);

/// Contiguous CPU view of `t`, or a contiguous copy (then a step copies it
/// back into `t` once the requests complete, when `output`).
at::Tensor staged(const at::Tensor& t, Issue& is, bool output);

c10::IValue tensor_list(const std::vector<at::Tensor>& ts);

c10::IValue tensor_lists(const std::vector<std::vector<at::Tensor>>& ts);

/// Whether a tensor list's members all match `ref`'s dtype and element count.
void check_same(const std::vector<at::Tensor>& ts, const at::Tensor& ref, const char* op,
                const char* what);

void check_root(int64_t root, int size, const char* op);

}  // namespace chorus_torch
