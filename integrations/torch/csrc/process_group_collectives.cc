// ProcessGroupChorus's collectives (process_group_chorus.h): broadcast,
// allreduce (and coalesced), reduce, allgather (base, coalesced), gather,
// scatter, reduce_scatter (and base), alltoall (and base), barrier. Each
// issues one Chorus request under the issue lock and enqueues its Work.
#include "process_group_chorus.h"
#include "tensor_args.h"

#include <ATen/MemoryOverlap.h>

#include <algorithm>

namespace chorus_torch {

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "chorus: broadcast takes one tensor");
  check_root(opts.rootRank, getSize(), "broadcast");
  std::lock_guard<std::mutex> order(issue_mu_);
  Issue is;
  at::Tensor t = staged(tensors[0], is, true);
  is.keep.push_back(t);
  chorus_request_t* r = nullptr;
  if (int rc = chorus_ibroadcast(comm_, t.data_ptr(), size_t(t.numel()), to_dtype(t),
                                 int(opts.rootRank), &r))
    fail("broadcast", rc);
  is.req = r;
  return enqueue(c10d::OpType::BROADCAST, "broadcast", std::move(is), tensor_list(tensors));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "chorus: allreduce takes one tensor");
  std::lock_guard<std::mutex> order(issue_mu_);
  Issue is;
  at::Tensor t = staged(tensors[0], is, true);
  issue_allreduce(is, t, opts.reduceOp, "allreduce");
  return enqueue(c10d::OpType::ALLREDUCE, "allreduce", std::move(is), tensor_list(tensors));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "chorus: allreduce_coalesced requires non-empty tensor list");
  for (auto& t : tensors) {
    check_cpu(t);
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "chorus: allreduce_coalesced requires tensors of one dtype, got ",
                tensors[0].scalar_type(), " and ", t.scalar_type());
  }
  std::lock_guard<std::mutex> order(issue_mu_);
  Issue is;
  std::vector<at::Tensor> flat_parts;
  for (auto& t : tensors) flat_parts.push_back(t.reshape({-1}));
  at::Tensor flat = at::cat(flat_parts);
  auto outs = tensors;
  is.post.push_back([flat, outs]() mutable {
    int64_t off = 0;
    for (auto& o : outs) {
      o.copy_(flat.narrow(0, off, o.numel()).view(o.sizes()));
      off += o.numel();
    }
  });
  issue_allreduce(is, flat, opts.reduceOp, "allreduce_coalesced");
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", std::move(is),
                 tensor_list(tensors));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "chorus: reduce takes one tensor");
  check_root(opts.rootRank, getSize(), "reduce");
  const int root = int(opts.rootRank);
  const bool at_root = getRank() == root;
  std::lock_guard<std::mutex> order(issue_mu_);
  Issue is;
  // Only the root's tensor is an output; elsewhere it is left as it was.
  at::Tensor t = staged(tensors[0], is, at_root);
  is.keep.push_back(t);
  const size_t count = size_t(t.numel());
  chorus_request_t* r = nullptr;
  int rc = CHORUS_OK;
  if (is_bitwise(opts.reduceOp)) {
    // Chorus has no bitwise ops: gather to the root, which folds in rank order.
    check_bitwise_dtype(t);
    at::Tensor flat;
    if (at_root) {
      flat = at::empty({int64_t(getSize()) * t.numel()}, t.options());
      is.keep.push_back(flat);
      is.post.insert(is.post.begin(), [t, flat, n = getSize(), op = opts.reduceOp]() mutable {
        t.copy_(fold_bitwise(flat, n, op).view(t.sizes()));
      });
    }
    rc = chorus_igather(comm_, t.data_ptr(), at_root ? flat.data_ptr() : nullptr, count,
                        to_dtype(t), root, &r);
  } else {
    rc = chorus_ireduce(comm_, t.data_ptr(), at_root ? t.data_ptr() : nullptr, count, to_dtype(t),
                        to_op(opts.reduceOp), root, &r);
  }
  if (rc != CHORUS_OK) fail("reduce", rc);
  is.req = r;
  return enqueue(c10d::OpType::REDUCE, "reduce", std::move(is), tensor_list(tensors));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
              "chorus: allgather takes one input tensor and one output list");
  TORCH_CHECK(int(outputs[0].size()) == getSize(), "chorus: allgather: output list has ",
              outputs[0].size(), " tensors, expected world_size ", getSize());
  check_same(outputs[0], inputs[0], "allgather", "output");
  std::lock_guard<std::mutex> order(issue_mu_);
  Issue is;
  at::Tensor in = staged(inputs[0], is, false);
  at::Tensor flat = at::empty({int64_t(getSize()) * in.numel()}, in.options());
  auto outs = outputs[0];
  is.post.push_back([flat, outs, n = in.numel()]() mutable {
    for (size_t i = 0; i < outs.size(); ++i)
      outs[i].copy_(flat.narrow(0, int64_t(i) * n, n).view(outs[i].sizes()));
  });
  is.keep = {in, flat};
  chorus_request_t* r = nullptr;
  if (int rc = chorus_iall_gather(comm_, in.data_ptr(), flat.data_ptr(), size_t(in.numel()),
                                  to_dtype(in), &r))
    fail("allgather", rc);
  is.req = r;
  return enqueue(c10d::OpType::ALLGATHER, "allgather", std::move(is), tensor_lists(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_allgather_base(at::Tensor& output,
                                                                   at::Tensor& input,
                                                                   const c10d::AllgatherOptions&) {
  check_cpu(output);
  check_cpu(input);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: _allgather_base: output dtype ",
              output.scalar_type(), " differs from input dtype ", input.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * getSize(), "chorus: _allgather_base: output has ",
              output.numel(),
              " elements, expected world_size * input = ", input.numel() * getSize());
  std::lock_guard<std::mutex> order(issue_mu_);
  Issue is;
  at::Tensor in = staged(input, is, false);
  at::Tensor out = staged(output, is, true);
  is.keep = {in, out};
  chorus_request_t* r = nullptr;
  if (int rc = chorus_iall_gather(comm_, in.data_ptr(), out.data_ptr(), size_t(in.numel()),
                                  to_dtype(in), &r))
    fail("_allgather_base", rc);
  is.req = r;
  return enqueue(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", std::move(is),
                 tensor_list({output}));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  TORCH_CHECK(int(outputs.size()) == getSize(), "chorus: allgather_coalesced: ", outputs.size(),
              " output lists, expected world_size ", getSize());
  for (auto& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(), "chorus: allgather_coalesced: an output list has ",
                list.size(), " tensors, expected one per input (", inputs.size(), ")");
    for (size_t i = 0; i < inputs.size(); ++i)
      check_same({list[i]}, inputs[i], "allgather_coalesced", "output");
  }
  std::lock_guard<std::mutex> order(issue_mu_);
  Issue is;
  // Inputs of any dtypes travel as one byte buffer.
  std::vector<at::Tensor> bytes;
  for (auto& t : inputs) {
    check_cpu(t);
    bytes.push_back(t.contiguous().reshape({-1}).view(at::kByte));
  }
  at::Tensor in = bytes.empty() ? at::empty({0}, at::kByte) : at::cat(bytes);
  at::Tensor flat = at::empty({int64_t(getSize()) * in.numel()}, in.options());
  auto outs = outputs;
  is.post.push_back([flat, outs, n = in.numel()]() mutable {
    for (size_t r = 0; r < outs.size(); ++r) {
      int64_t off = int64_t(r) * n;
      for (auto& o : outs[r]) {
        int64_t nb = o.numel() * int64_t(o.element_size());
        o.copy_(flat.narrow(0, off, nb).view(o.scalar_type()).view(o.sizes()));
        off += nb;
      }
    }
  });
  is.keep = {in, flat};
  chorus_request_t* r = nullptr;
  if (int rc = chorus_iall_gather(comm_, in.data_ptr(), flat.data_ptr(), size_t(in.numel()),
                                  CHORUS_UINT8, &r))
    fail("allgather_coalesced", rc);
  is.req = r;
  return enqueue(c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", std::move(is),
                 tensor_lists(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  check_root(opts.rootRank, getSize(), "gather");
  TORCH_CHECK(inputs.size() == 1, "chorus: gather takes one input tensor");
  check_cpu(inputs[0]);
  if (getRank() == opts.rootRank) {
    TORCH_CHECK(outputs.size() == 1, "chorus: gather: the root needs one output list");
    TORCH_CHECK(int(outputs[0].size()) == getSize(), "chorus: gather: output list has ",
                outputs[0].size(), " tensors, expected world_size ", getSize());
    check_same(outputs[0], inputs[0], "gather", "output");
  } else {
    TORCH_CHECK(outputs.empty(), "chorus: gather: only the root (rank ", opts.rootRank,
                ") takes output tensors");
  }
  const int root = int(opts.rootRank);
  std::lock_guard<std::mutex> order(issue_mu_);
  Issue is;
  at::Tensor in = staged(inputs[0], is, false);
  is.keep.push_back(in);
  // The root receives into one flat buffer and copies each block out.
  at::Tensor flat;
  if (getRank() == root) {
    flat = at::empty({int64_t(getSize()) * in.numel()}, in.options());
    is.keep.push_back(flat);
    is.post.push_back([flat, outs = outputs[0], n = in.numel()]() mutable {
      for (size_t i = 0; i < outs.size(); ++i)
        outs[i].copy_(flat.narrow(0, int64_t(i) * n, n).view(outs[i].sizes()));
    });
  }
  chorus_request_t* r = nullptr;
  if (int rc = chorus_igather(comm_, in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr,
                              size_t(in.numel()), to_dtype(in), root, &r))
    fail("gather", rc);
  is.req = r;
  return enqueue(c10d::OpType::GATHER, "gather", std::move(is), tensor_lists(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  check_root(opts.rootRank, getSize(), "scatter");
  TORCH_CHECK(outputs.size() == 1, "chorus: scatter takes one output tensor");
  check_cpu(outputs[0]);
  if (getRank() == opts.rootRank) {
    TORCH_CHECK(inputs.size() == 1, "chorus: scatter: the root needs one input list");
    TORCH_CHECK(int(inputs[0].size()) == getSize(), "chorus: scatter: input list has ",
                inputs[0].size(), " tensors, expected world_size ", getSize());
    check_same(inputs[0], outputs[0], "scatter", "input");
  } else {
    TORCH_CHECK(inputs.empty(), "chorus: scatter: only the root (rank ", opts.rootRank,
                ") takes input tensors");
  }
  const int root = int(opts.rootRank);
  std::lock_guard<std::mutex> order(issue_mu_);
  Issue is;
  at::Tensor out = staged(outputs[0], is, true);
  is.keep.push_back(out);
  // The root sends from one flat copy of its input list.
  at::Tensor flat;
  if (getRank() == root) {
    flat = flatten(inputs[0], out);
    is.keep.push_back(flat);
  }
  chorus_request_t* r = nullptr;
  if (int rc = chorus_iscatter(comm_, flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(),
                               size_t(out.numel()), to_dtype(out), root, &r))
    fail("scatter", rc);
  is.req = r;
  return enqueue(c10d::OpType::SCATTER, "scatter", std::move(is), tensor_list(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
              "chorus: reduce_scatter takes one output tensor and one input list");
  TORCH_CHECK(int(inputs[0].size()) == getSize(), "chorus: reduce_scatter: input list has ",
              inputs[0].size(), " tensors, expected world_size ", getSize());
  check_cpu(outputs[0]);
  check_same(inputs[0], outputs[0], "reduce_scatter", "input");
  int op = to_op(opts.reduceOp);
  std::lock_guard<std::mutex> order(issue_mu_);
  Issue is;
  at::Tensor out = staged(outputs[0], is, true);
  std::vector<at::Tensor> flat_parts;
  for (auto& t : inputs[0]) flat_parts.push_back(t.reshape({-1}));
  at::Tensor in = at::cat(flat_parts);
  is.keep = {in, out};
  chorus_request_t* r = nullptr;
  if (int rc = chorus_ireduce_scatter(comm_, in.data_ptr(), out.data_ptr(), size_t(out.numel()),
                                      to_dtype(out), op, &r))
    fail("reduce_scatter", rc);
  is.req = r;
  return enqueue(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", std::move(is),
                 tensor_list(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_cpu(output);
  check_cpu(input);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "chorus: _reduce_scatter_base: output dtype ", output.scalar_type(),
              " differs from input dtype ", input.scalar_type());
  TORCH_CHECK(input.numel() == output.numel() * getSize(),
              "chorus: _reduce_scatter_base: input has ", input.numel(),
              " elements, expected world_size * output = ", output.numel() * getSize());
  int op = to_op(opts.reduceOp);
  std::lock_guard<std::mutex> order(issue_mu_);
  Issue is;
  at::Tensor in = staged(input, is, false);
  at::Tensor out = staged(output, is, true);
  is.keep = {in, out};
  chorus_request_t* r = nullptr;
  if (int rc = chorus_ireduce_scatter(comm_, in.data_ptr(), out.data_ptr(), size_t(out.numel()),
                                      to_dtype(out), op, &r))
    fail("_reduce_scatter_base", rc);
  is.req = r;
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", std::move(is),
                 tensor_list({output}));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
    std::vector<int64_t>& input_splits, const c10d::AllToAllOptions&) {
  check_cpu(output);
  check_cpu(input);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: alltoall_base: output dtype ",
              output.scalar_type(), " differs from input dtype ", input.scalar_type());
  auto in_counts = split_counts(input, input_splits, "input");
  auto out_counts = split_counts(output, output_splits, "output");
  std::lock_guard<std::mutex> order(issue_mu_);
  Issue is;
  at::Tensor in = staged(input, is, false);
  at::Tensor out = staged(output, is, true);
  // all_to_allv has no in-place form: a caller passing one tensor twice
  // gets its input copied first.
  if (at::get_overlap_status(in, out) != at::MemOverlapStatus::No) in = in.clone();
  issue_alltoall(is, in, in_counts, out, out_counts, "alltoall_base");
  return enqueue(c10d::OpType::ALLTOALL_BASE, "alltoall_base", std::move(is),
                 tensor_list({output}));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions&) {
  TORCH_CHECK(int(outputs.size()) == getSize() && int(inputs.size()) == getSize(),
              "chorus: alltoall: needs world_size (", getSize(), ") input and output tensors, got ",
              inputs.size(), " and ", outputs.size());
  for (int p = 0; p < getSize(); ++p) {
    check_cpu(inputs[p]);
    check_cpu(outputs[p]);
    TORCH_CHECK(inputs[p].scalar_type() == inputs[0].scalar_type() &&
                    outputs[p].scalar_type() == inputs[0].scalar_type(),
                "chorus: alltoall: every input and output tensor needs the same dtype");
  }
  std::lock_guard<std::mutex> order(issue_mu_);
  Issue is;
  // The library takes one send and one receive buffer: the inputs travel
  // as one flat copy, the outputs are copied out of one flat buffer.
  std::vector<int64_t> in_counts, out_counts;
  int64_t out_total = 0;
  for (int p = 0; p < getSize(); ++p) {
    in_counts.push_back(inputs[p].numel());
    out_counts.push_back(outputs[p].numel());
    out_total += outputs[p].numel();
  }
  at::Tensor in = flatten(inputs, inputs[0]);
  at::Tensor out = at::empty({out_total}, inputs[0].options());
  is.post.push_back([out, outs = outputs]() mutable {
    int64_t off = 0;
    for (auto& o : outs) {
      o.copy_(out.narrow(0, off, o.numel()).view(o.sizes()));
      off += o.numel();
    }
  });
  issue_alltoall(is, in, in_counts, out, out_counts, "alltoall");
  return enqueue(c10d::OpType::ALLTOALL, "alltoall", std::move(is), tensor_list(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::barrier(const c10d::BarrierOptions&) {
  std::lock_guard<std::mutex> order(issue_mu_);
  Issue is;
  chorus_request_t* r = nullptr;
  if (int rc = chorus_ibarrier(comm_, &r)) fail("barrier", rc);
  is.req = r;
  return enqueue(c10d::OpType::BARRIER, "barrier", std::move(is),
                 tensor_list(std::vector<at::Tensor>{}));
}

std::vector<int64_t> ProcessGroupChorus::split_counts(const at::Tensor& t,
                                                      const std::vector<int64_t>& splits,
                                                      const char* what) const {
  int n = getSize();
  int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  int64_t row = rows == 0 ? 0 : t.numel() / rows;
  std::vector<int64_t> counts(size_t(n), 0);
  if (splits.empty()) {
    TORCH_CHECK(rows % n == 0, "chorus: alltoall_base: ", what, " dim 0 (", rows,
                ") does not divide equally across the group size ", n);
    for (auto& c : counts) c = rows / n * row;
    return counts;
  }
  TORCH_CHECK(int(splits.size()) == n, "chorus: alltoall_base: ", what, " split sizes have ",
              splits.size(), " entries, expected the group size ", n);
  int64_t sum = 0;
  for (int p = 0; p < n; ++p) {
    TORCH_CHECK(splits[p] >= 0, "chorus: alltoall_base: negative ", what, " split size");
    sum += splits[p];
    counts[size_t(p)] = splits[p] * row;
  }
  TORCH_CHECK(sum == rows, "chorus: alltoall_base: ", what, " split sizes sum to ", sum,
              ", but dim 0 is ", rows);
  return counts;
}

void ProcessGroupChorus::issue_allreduce(Issue& is, const at::Tensor& t,
                                         const c10d::ReduceOp& reduce_op, const char* name) {
  chorus_request_t* r = nullptr;
  if (is_bitwise(reduce_op)) {
    check_bitwise_dtype(t);
    at::Tensor flat = at::empty({int64_t(getSize()) * t.numel()}, t.options());
    is.keep.insert(is.keep.end(), {t, flat});
    is.post.insert(is.post.begin(), [t, flat, n = getSize(), reduce_op]() mutable {
      t.copy_(fold_bitwise(flat, n, reduce_op).view(t.sizes()));
    });
    if (int rc = chorus_iall_gather(comm_, t.data_ptr(), flat.data_ptr(), size_t(t.numel()),
                                    to_dtype(t), &r))
      fail(name, rc);
  } else {
    int op = to_op(reduce_op);
    is.keep.push_back(t);
    if (int rc = chorus_iall_reduce(comm_, t.data_ptr(), t.data_ptr(), size_t(t.numel()),
                                    to_dtype(t), op, &r))
      fail(name, rc);
  }
  is.req = r;
}

at::Tensor ProcessGroupChorus::flatten(const std::vector<at::Tensor>& ts, const at::Tensor& like) {
  if (ts.empty()) return at::empty({0}, like.options());
  std::vector<at::Tensor> parts;
  for (auto& t : ts) parts.push_back(t.reshape({-1}));
  return at::cat(parts);
}

void ProcessGroupChorus::issue_alltoall(Issue& is, const at::Tensor& in,
                                        const std::vector<int64_t>& in_counts,
                                        const at::Tensor& out,
                                        const std::vector<int64_t>& out_counts, const char* name) {
  const int n = getSize();
  is.keep.insert(is.keep.end(), {in, out});
  chorus_request_t* r = nullptr;
  int rc = CHORUS_OK;
  const bool equal = std::all_of(in_counts.begin(), in_counts.end(),
                                 [&](int64_t c) { return c == in_counts[0]; }) &&
                     std::all_of(out_counts.begin(), out_counts.end(),
                                 [&](int64_t c) { return c == in_counts[0]; });
  if (equal) {
    rc = chorus_iall_to_all(comm_, in.data_ptr(), out.data_ptr(), size_t(in_counts[0]),
                            to_dtype(in), &r);
  } else {
    const size_t np = size_t(n);
    std::vector<size_t> sc(np), so(np), rcnt(np), ro(np);
    size_t s_off = 0, r_off = 0;
    for (size_t p = 0; p < np; ++p) {
      sc[p] = size_t(in_counts[p]);
      so[p] = s_off;
      s_off += sc[p];
      rcnt[p] = size_t(out_counts[p]);
      ro[p] = r_off;
      r_off += rcnt[p];
    }
    rc = chorus_iall_to_allv(comm_, in.data_ptr(), sc.data(), so.data(), out.data_ptr(),
                             rcnt.data(), ro.data(), to_dtype(in), &r);
  }
  if (rc != CHORUS_OK) fail(name, rc);
  is.req = r;
}

}  // namespace chorus_torch
