// The backend's gathers to one rank, scatters, all-to-alls, point to point and barriers.
#include <string>
#include <utility>

#include "python/torch_backend/backend.h"
#include "python/torch_backend/errors.h"
#include "python/torch_backend/tensors.h"

namespace braid_torch {
namespace {

// `tensor`'s rows split by `splits` (dim 0), or in `size` equal parts when splits is empty.
std::vector<at::Tensor> SplitRows(const at::Tensor& tensor, const std::vector<int64_t>& splits, int size,
                                  const char* which) {
  const int64_t rows = tensor.dim() > 0 ? tensor.size(0) : 0;
  std::vector<int64_t> counts = splits;
  if (counts.empty()) {
    if (rows % size != 0) {
      Fail("braid alltoall_base: " + std::to_string(rows) + " rows of the " + which + " do not split evenly over " +
           std::to_string(size) + " ranks");
    }
    counts.assign(size, rows / size);
  }
  if (static_cast<int>(counts.size()) != size) {
    Fail("braid alltoall_base: " + std::to_string(counts.size()) + " " + which + " split sizes for " +
         std::to_string(size) + " ranks");
  }
  std::vector<at::Tensor> parts;
  int64_t row = 0;
  for (int64_t count : counts) {
    if (count < 0 || row + count > rows) {
      Fail(std::string("braid alltoall_base: the ") + which + " split sizes exceed its " + std::to_string(rows) +
           " rows");
    }
    parts.push_back(tensor.narrow(0, row, count));
    row += count;
  }
  if (row != rows) {
    Fail(std::string("braid alltoall_base: the ") + which + " split sizes add up to " + std::to_string(row) +
         " rows, it has " + std::to_string(rows));
  }
  return parts;
}

bool AllSameNumel(const std::vector<at::Tensor>& tensors) {
  for (const at::Tensor& t : tensors) {
    if (t.numel() != tensors[0].numel()) return false;
  }
  return true;
}

}  // namespace

void BraidBackend::PostExchange(const std::vector<at::Tensor>& send_to, const std::vector<at::Tensor>& recv_from,
                                const braid_call_options& call, std::vector<braid_work*>& works) const {
  // Pairs in one global order, (min rank, max rank): the lower rank of a
  // pair sends first, the higher receives first, so no cycle of waits.
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    const at::Tensor& out = send_to[peer];
    const at::Tensor& in = recv_from[peer];
    auto send = [&] {
      if (out.numel() == 0) return;
      const braid_buffer b = ToBuffer(out, Use::kMove, "alltoall");
      PostOne(works, [&](braid_work** w) { return braid_send(group_, &b, peer, &call, w); });
    };
    auto recv = [&] {
      if (in.numel() == 0) return;
      const braid_buffer b = ToBuffer(in, Use::kMove, "alltoall");
      PostOne(works, [&](braid_work** w) { return braid_recv(group_, &b, peer, &call, w); });
    };
    if (rank_ < peer) {
      send();
      recv();
    } else {
      recv();
      send();
    }
  }
}

// Every rank's input gathered everywhere (braid has no gather of its own);
// the root copies the blocks out.
c10::intrusive_ptr<c10d::Work> BraidBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                    std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  const at::Tensor input = Single(inputs, "gather").contiguous();
  const bool root = opts.rootRank == rank_;
  std::vector<at::Tensor> copy_to;
  if (root) {
    if (outputs.size() != 1) Fail("braid gather: the root expects one output list");
    copy_to = outputs[0];
    CheckNumel(static_cast<int64_t>(copy_to.size()), size_, "gather", "the root's output list");
    for (const at::Tensor& t : copy_to) {
      CheckLike(t, input, "gather", "an output");
      CheckNumel(t.numel(), input.numel(), "gather", "an output");
    }
  } else if (!outputs.empty() && !outputs[0].empty()) {
    Fail("braid gather: only the root (rank " + std::to_string(opts.rootRank) + ") passes output tensors");
  }
  at::Tensor flat = at::empty({size_ * input.numel()}, input.options());
  const braid_buffer in = ToBuffer(input, Use::kMove, "gather");
  const braid_buffer out = ToBuffer(flat, Use::kMove, "gather");
  const braid_call_options call = CallOptions(opts.timeout, opts.asyncOp);
  return Issue(
      c10d::OpType::GATHER, "braid:gather", copy_to, {input, flat},
      [flat, copy_to]() mutable { Unflatten(flat, copy_to); },
      [&](auto& works) {
        PostOne(works, [&](braid_work** w) { return braid_all_gather(group_, &in, &out, &call, w); });
      });
}

// The root's inputs broadcast as one flat buffer; each rank keeps its block.
c10::intrusive_ptr<c10d::Work> BraidBackend::scatter(std::vector<at::Tensor>& outputs,
                                                     std::vector<std::vector<at::Tensor>>& inputs,
                                                     const c10d::ScatterOptions& opts) {
  const at::Tensor& output = Single(outputs, "scatter");
  CheckWritable(output, "scatter", "the output");
  const bool root = opts.rootRank == rank_;
  at::Tensor flat;
  if (root) {
    if (inputs.size() != 1) Fail("braid scatter: the root expects one input list");
    CheckNumel(static_cast<int64_t>(inputs[0].size()), size_, "scatter", "the root's input list");
    for (const at::Tensor& t : inputs[0]) {
      CheckLike(t, output, "scatter", "an input", "the output");
      CheckNumel(t.numel(), output.numel(), "scatter", "an input");
    }
    flat = Flatten(inputs[0]);
  } else {
    if (!inputs.empty() && !inputs[0].empty()) {
      Fail("braid scatter: only the root (rank " + std::to_string(opts.rootRank) + ") passes input tensors");
    }
    flat = at::empty({size_ * output.numel()}, output.options());
  }
  const braid_buffer buffer = ToBuffer(flat, Use::kMove, "scatter");
  const int root_rank = static_cast<int>(opts.rootRank);
  const braid_call_options call = CallOptions(opts.timeout, opts.asyncOp);
  at::Tensor target = output;
  const int64_t offset = rank_ * output.numel();
  return Issue(
      c10d::OpType::SCATTER, "braid:scatter", outputs, {flat, output},
      [flat, target, offset]() mutable { target.view({-1}).copy_(flat.narrow(0, offset, target.numel())); },
      [&](auto& works) {
        PostOne(works, [&](braid_work** w) { return braid_broadcast(group_, &buffer, root_rank, &call, w); });
      });
}

// Equal splits run as braid's all-to-all; uneven ones as point-to-point pairs.
c10::intrusive_ptr<c10d::Work> BraidBackend::alltoall_base(at::Tensor& output, at::Tensor& input_tensor,
                                                           std::vector<int64_t>& output_splits,
                                                           std::vector<int64_t>& input_splits,
                                                           const c10d::AllToAllOptions& opts) {
  const at::Tensor input = input_tensor.contiguous();
  CheckLike(output, input, "alltoall_base", "the output");
  CheckWritable(output, "alltoall_base", "the output");
  std::vector<at::Tensor> send_to = SplitRows(input, input_splits, size_, "input");
  std::vector<at::Tensor> recv_from = SplitRows(output, output_splits, size_, "output");
  const braid_call_options call = CallOptions(opts.timeout, opts.asyncOp);
  if (input_splits.empty() && output_splits.empty()) {
    CheckNumel(output.numel(), input.numel(), "alltoall_base", "the output");
    const braid_buffer in = ToBuffer(input, Use::kMove, "alltoall_base");
    const braid_buffer out = ToBuffer(output, Use::kMove, "alltoall_base");
    return Issue(c10d::OpType::ALLTOALL_BASE, "braid:all_to_all", {output}, {input, output}, {}, [&](auto& works) {
      PostOne(works, [&](braid_work** w) { return braid_all_to_all(group_, &in, &out, &call, w); });
    });
  }
  CheckNumel(recv_from[rank_].numel(), send_to[rank_].numel(), "alltoall_base", "this rank's block to itself");
  at::Tensor own_in = send_to[rank_], own_out = recv_from[rank_];
  return Issue(
      c10d::OpType::ALLTOALL_BASE, "braid:all_to_all_v", {output}, {input, output},
      [own_in, own_out]() mutable { own_out.copy_(own_in); },
      [&](auto& works) { PostExchange(send_to, recv_from, call, works); });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                      const c10d::AllToAllOptions& opts) {
  CheckNumel(static_cast<int64_t>(inputs.size()), size_, "alltoall", "the input list");
  CheckNumel(static_cast<int64_t>(outputs.size()), size_, "alltoall", "the output list");
  for (int r = 0; r < size_; ++r) {
    CheckLike(inputs[r], inputs[0], "alltoall", "an input", "the first input");
    CheckLike(outputs[r], inputs[0], "alltoall", "an output", "the first input");
    CheckWritable(outputs[r], "alltoall", "an output");
  }
  const braid_call_options call = CallOptions(opts.timeout, opts.asyncOp);
  if (!AllSameNumel(inputs) || !AllSameNumel(outputs) || inputs[0].numel() != outputs[0].numel()) {
    std::vector<at::Tensor> send_to;
    for (const at::Tensor& t : inputs) send_to.push_back(t.contiguous());
    CheckNumel(outputs[rank_].numel(), send_to[rank_].numel(), "alltoall", "this rank's tensor to itself");
    at::Tensor own_in = send_to[rank_], own_out = outputs[rank_];
    return Issue(
        c10d::OpType::ALLTOALL, "braid:all_to_all_v", outputs, send_to,
        [own_in, own_out]() mutable { own_out.copy_(own_in); },
        [&](auto& works) { PostExchange(send_to, outputs, call, works); });
  }
  at::Tensor flat_in = Flatten(inputs);
  at::Tensor flat_out = at::empty_like(flat_in);
  const braid_buffer in = ToBuffer(flat_in, Use::kMove, "alltoall");
  const braid_buffer out = ToBuffer(flat_out, Use::kMove, "alltoall");
  std::vector<at::Tensor> copy_to = outputs;
  return Issue(
      c10d::OpType::ALLTOALL, "braid:all_to_all", outputs, {flat_in, flat_out},
      [flat_out, copy_to]() mutable { Unflatten(flat_out, copy_to); },
      [&](auto& works) {
        PostOne(works, [&](braid_work** w) { return braid_all_to_all(group_, &in, &out, &call, w); });
      });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::barrier(const c10d::BarrierOptions& opts) {
  const braid_call_options call = CallOptions(opts.timeout, opts.asyncOp);
  return Issue(c10d::OpType::BARRIER, "braid:barrier", {}, {}, {}, [&](auto& works) {
    PostOne(works, [&](braid_work** w) { return braid_barrier(group_, &call, w); });
  });
}

void BraidBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  using std::chrono::milliseconds;
  const milliseconds timeout =
      opts.timeout.count() > 0 ? opts.timeout : milliseconds(static_cast<int64_t>(timeout_sec_.load() * 1000));
  const milliseconds bound = timeout.count() > 0 ? timeout : milliseconds(600000);
  if (!store_) Fail("braid monitored_barrier: this backend was made without a store (share_backend)");
  const std::string prefix = "braid/monitored_barrier/" + std::to_string(monitored_barriers_++) + "/";
  if (rank_ != 0) {
    store_->set(prefix + std::to_string(rank_), std::vector<uint8_t>{1});
    try {
      store_->wait({prefix + "result"}, bound + milliseconds(5000));  // rank 0 answers within its own bound
    } catch (const std::exception& e) {
      Fail("braid monitored_barrier: rank " + std::to_string(rank_) + " heard nothing from rank 0 within " +
           std::to_string(bound.count()) + " ms: " + MessageOf(e));
    }
    const std::vector<uint8_t> result = store_->get(prefix + "result");
    if (!result.empty()) Fail(std::string(result.begin(), result.end()));
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + bound;
  std::vector<int> missing;
  for (int r = 1; r < size_; ++r) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    const std::string key = prefix + std::to_string(r);
    bool arrived = false;
    try {
      if (left.count() > 0) {
        store_->wait({key}, left);
        arrived = true;
      } else {
        arrived = store_->check({key});
      }
    } catch (const std::exception&) {
      arrived = false;
    }
    if (!arrived) {
      missing.push_back(r);
      if (!wait_all_ranks) break;
    }
  }
  std::string message;
  if (!missing.empty()) {
    std::string ranks;
    for (int r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    message = "braid monitored_barrier: rank" + std::string(missing.size() > 1 ? "s " : " ") + ranks +
              " failed to pass monitoredBarrier in " + std::to_string(bound.count()) + " ms (rank 0 waited)";
  }
  store_->set(prefix + "result", std::vector<uint8_t>(message.begin(), message.end()));
  if (!message.empty()) Fail(message);
}

c10::intrusive_ptr<c10d::Work> BraidBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  const at::Tensor tensor = Single(tensors, "send").contiguous();
  const braid_buffer buffer = ToBuffer(tensor, Use::kMove, "send");
  const braid_call_options call = CallOptions(std::chrono::milliseconds(-1), /*async=*/true);
  return Issue(c10d::OpType::SEND, "braid:send", tensors, {tensor}, {}, [&](auto& works) {
    PostOne(works, [&](braid_work** w) { return braid_send(group_, &buffer, dst, &call, w); });
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  auto work = Receive(tensors, src, c10d::OpType::RECV, "braid:recv");
  static_cast<BraidWork*>(work.get())->set_source_rank(src);
  return work;
}

c10::intrusive_ptr<c10d::Work> BraidBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  // The Work's sourceRank() is set when braid's receive finishes (Completion::Await).
  return Receive(tensors, BRAID_ANY_SOURCE, c10d::OpType::RECVANYSOURCE, "braid:recv_anysource");
}

c10::intrusive_ptr<c10d::Work> BraidBackend::Receive(std::vector<at::Tensor>& tensors, int src, c10d::OpType type,
                                                     const char* title) {
  const at::Tensor& tensor = Single(tensors, "recv");
  CheckWritable(tensor, "recv", "the tensor");
  const braid_buffer buffer = ToBuffer(tensor, Use::kMove, "recv");
  const braid_call_options call = CallOptions(std::chrono::milliseconds(-1), /*async=*/true);
  return Issue(type, title, tensors, {tensor}, {}, [&](auto& works) {
    PostOne(works, [&](braid_work** w) { return braid_recv(group_, &buffer, src, &call, w); });
  });
}

}  // namespace braid_torch
