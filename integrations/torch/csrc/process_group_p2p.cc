// ProcessGroupChorus's point-to-point (process_group_chorus.h): send, recv
// and recvAnysource on the library's tagged calls with the c10d tag. Sends
// and receives match on (source, tag) like MPI's, in any posting order on
// either side, and progress alongside the collectives; their Works are
// completed on pool threads, since they finish out of issue order.
#include "process_group_chorus.h"
#include "tensor_args.h"

namespace chorus_torch {

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::send(std::vector<at::Tensor>& tensors, int dst,
                                                        int tag) {
  TORCH_CHECK(tensors.size() == 1, "chorus: send takes one tensor");
  check_tag(tag, "send");
  std::lock_guard<std::mutex> order(issue_mu_);
  Issue is;
  at::Tensor t = staged(tensors[0], is, false);
  is.keep.push_back(t);
  is.tagged = true;
  chorus_request_t* r = nullptr;
  if (int rc =
          chorus_isend_tagged(comm_, t.data_ptr(), size_t(t.numel()), to_dtype(t), dst, tag, &r))
    fail("send", rc);
  is.req = r;
  return enqueue(c10d::OpType::SEND, "send", std::move(is), tensor_list(tensors));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recv(std::vector<at::Tensor>& tensors, int src,
                                                        int tag) {
  TORCH_CHECK(tensors.size() == 1, "chorus: recv takes one tensor");
  TORCH_CHECK(src >= 0, "chorus: recv: invalid source rank ", src,
              " (recv without a source is recvAnysource)");
  return issue_recv(tensors, src, tag, c10d::OpType::RECV, "recv");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                 int tag) {
  TORCH_CHECK(tensors.size() == 1, "chorus: recvAnysource takes one tensor");
  return issue_recv(tensors, CHORUS_ANY_SOURCE, tag, c10d::OpType::RECVANYSOURCE, "recvAnysource");
}

void ProcessGroupChorus::check_tag(int tag, const char* op) {
  TORCH_CHECK(tag >= 0, "chorus: ", op, ": tag ", tag, " is negative; tags are 0..",
              CHORUS_TAG_MAX);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::issue_recv(std::vector<at::Tensor>& tensors,
                                                              int src, int tag, c10d::OpType type,
                                                              const char* name) {
  check_tag(tag, name);
  std::lock_guard<std::mutex> order(issue_mu_);
  Issue is;
  at::Tensor t = staged(tensors[0], is, true);
  is.keep.push_back(t);
  is.tagged = true;
  is.recv_count = t.numel();
  chorus_request_t* r = nullptr;
  if (int rc =
          chorus_irecv_tagged(comm_, t.data_ptr(), size_t(t.numel()), to_dtype(t), src, tag, &r))
    fail(name, rc);
  is.req = r;
  return enqueue(type, name, std::move(is), tensor_list(tensors), src);
}

}  // namespace chorus_torch
