// The backend's one way to issue, coalescing, and the reductions and gathers
// (its lifecycle is in backend_lifecycle.cc).
#include "python/torch_backend/backend.h"

#include <Python.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <string>
#include <utility>

#include "python/torch_backend/errors.h"
#include "python/torch_backend/tensors.h"

namespace braid_torch {
namespace {

// A PREMUL_SUM's input multiplied by its factor: in place when the
// collective writes its input anyway, else a copy.
at::Tensor Premultiplied(const at::Tensor& tensor, const Reduction& r, bool in_place) {
  if (!r.premultiply) return tensor;
  at::Tensor target = in_place ? tensor : tensor.clone();
  if (r.factor_tensor.defined()) {
    target.mul_(r.factor_tensor.to(target.device()));
  } else {
    target.mul_(r.factor);
  }
  return target;
}

// Rank-major blocks of several tensors of `size` blocks each, as one flat
// tensor: block r is tensor 0's block r, then tensor 1's block r, ...
at::Tensor RankMajor(const std::vector<at::Tensor>& tensors, int size) {
  std::vector<at::Tensor> pieces;
  for (int r = 0; r < size; ++r) {
    for (const at::Tensor& t : tensors) {
      const int64_t block = t.numel() / size;
      pieces.push_back(t.reshape({-1}).narrow(0, r * block, block));
    }
  }
  return at::cat(pieces);
}

// The inverse of RankMajor for outputs of `size` blocks each.
void FromRankMajor(const at::Tensor& flat, std::vector<at::Tensor>& tensors, int size) {
  int64_t offset = 0;
  for (int r = 0; r < size; ++r) {
    for (at::Tensor& t : tensors) {
      const int64_t block = t.numel() / size;
      t.view({-1}).narrow(0, r * block, block).copy_(flat.narrow(0, offset, block));
      offset += block;
    }
  }
}

}  // namespace

void Check(braid_status status) {
  if (status != BRAID_OK) Fail(braid_last_error());
}

void BraidBackend::startCoalescing() {
  std::lock_guard<std::mutex> lock(completion_->mu);
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> BraidBackend::endCoalescing() {
  std::vector<c10::intrusive_ptr<BraidWork>> covered;
  std::vector<at::Tensor> outputs;
  {
    std::lock_guard<std::mutex> lock(completion_->mu);
    if (!coalescing_) Fail("braid endCoalescing: no startCoalescing before it");
    coalescing_ = false;
    covered.swap(coalesced_);
  }
  for (const auto& work : covered) {
    for (const at::Tensor& t : work->result()) outputs.push_back(t);
  }
  auto handle = c10::make_intrusive<BraidWork>(rank_, c10d::OpType::COALESCED, "braid:coalesced",
                                               std::move(outputs), seq_.load(), completion_);
  {
    std::lock_guard<std::mutex> lock(completion_->mu);
    Pending pending;
    pending.handle = handle;
    pending.covers = std::move(covered);
    completion_->queue.push_back(std::move(pending));  // after every covered one: completes after them
  }
  completion_->bell->Ring();
  return handle;
}

c10::intrusive_ptr<c10d::Work> BraidBackend::Issue(c10d::OpType type, const char* title,
                                                   std::vector<at::Tensor> outputs,
                                                   std::vector<at::Tensor> keep_alive,
                                                   std::function<void()> on_success, const Post& post) {
  Pending pending;
  {
    std::lock_guard<std::mutex> lock(completion_->mu);
    group();  // throws once shut down
    pending.handle = c10::make_intrusive<BraidWork>(rank_, type, title, std::move(outputs), ++seq_, completion_);
    pending.on_success = std::move(on_success);
    pending.keep_alive = std::move(keep_alive);
    try {
      post(pending.works);
    } catch (...) {
      // What was posted still runs: the thread waits for it and frees it.
      if (!pending.works.empty()) {
        pending.on_success = nullptr;
        completion_->queue.push_back(std::move(pending));
        completion_->bell->Ring();
      }
      throw;
    }
    if (coalescing_) coalesced_.push_back(pending.handle);
    // braid ran it inline (a small blocking collective on an idle group) and
    // nothing earlier is unfinished: finish it here, without waking the
    // thread (two thread switches were most of an 8-byte all-reduce's time).
    bool inline_finish = completion_->Idle();
    for (braid_work* work : pending.works) {
      int done = 0;
      inline_finish = inline_finish && braid_work_test(work, &done) == BRAID_OK && done != 0;
    }
    if (inline_finish) {
      completion_->busy = true;
    } else {
      // A failure too: the thread reports it in order. braid's finishing
      // thread wakes the waiter; the caller returns without waking anyone.
      completion_->Watch(pending);
      std::shared_ptr<Arrival> arrival = pending.arrival;
      c10::intrusive_ptr<BraidWork> handle = pending.handle;
      completion_->queue.push_back(std::move(pending));
      arrival->Arrive();  // registered: the last of braid's callbacks (or this) rings
      return handle;
    }
  }
  // Finished inline. Its callbacks run here, after `busy` is released: one
  // that issues and waits for another operation must not hold the waiter back.
  std::exception_ptr error = Completion::Await(pending);
  bool others_waiting = false;
  {
    std::lock_guard<std::mutex> lock(completion_->mu);
    completion_->busy = false;
    others_waiting = !completion_->queue.empty();
  }
  if (others_waiting) completion_->bell->Ring();  // issued by another thread meanwhile
  Completion::Complete(pending, error);
  return pending.handle;
}

c10::intrusive_ptr<c10d::Work> BraidBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                       const c10d::BroadcastOptions& opts) {
  const at::Tensor& tensor = Single(tensors, "broadcast");
  if (opts.rootTensor != 0) Fail("braid broadcast: rootTensor must be 0 (one tensor per call)");
  const braid_buffer buffer = ToBuffer(tensor, Use::kMove, "broadcast");
  const int root = static_cast<int>(opts.rootRank);
  const braid_call_options call = CallOptions(opts.timeout, opts.asyncOp);
  return Issue(c10d::OpType::BROADCAST, "braid:broadcast", tensors, {tensor}, {}, [&](auto& works) {
    PostOne(works, [&](braid_work** w) { return braid_broadcast(group_, &buffer, root, &call, w); });
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::AllreduceOptions& opts) {
  const at::Tensor& tensor = Single(tensors, "allreduce");
  const Reduction r = ToReduction(opts.reduceOp, tensor.scalar_type(), "allreduce");
  const braid_buffer buffer = ToBuffer(tensor, Use::kReduce, "allreduce");
  Premultiplied(tensor, r, /*in_place=*/true);
  const braid_call_options call = CallOptions(opts.timeout, opts.asyncOp);
  return Issue(c10d::OpType::ALLREDUCE, "braid:all_reduce", tensors, {tensor}, {}, [&](auto& works) {
    PostOne(works, [&](braid_work** w) { return braid_all_reduce(group_, &buffer, &buffer, r.op, &call, w); });
  });
}

// Several tensors of one dtype reduced as one flat buffer, then copied back.
c10::intrusive_ptr<c10d::Work> BraidBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                 const c10d::AllreduceCoalescedOptions& opts) {
  if (tensors.empty()) Fail("braid allreduce_coalesced: no tensors");
  for (const at::Tensor& t : tensors) CheckLike(t, tensors[0], "allreduce_coalesced", "a tensor", "the first");
  const Reduction r = ToReduction(opts.reduceOp, tensors[0].scalar_type(), "allreduce_coalesced");
  at::Tensor flat = Premultiplied(Flatten(tensors), r, /*in_place=*/true);
  const braid_buffer buffer = ToBuffer(flat, Use::kReduce, "allreduce_coalesced");
  std::vector<at::Tensor> outputs = tensors;
  const braid_call_options call = CallOptions(opts.timeout, opts.asyncOp);
  return Issue(
      c10d::OpType::ALLREDUCE_COALESCED, "braid:all_reduce_coalesced", tensors, {flat},
      [flat, outputs]() mutable { Unflatten(flat, outputs); },
      [&](auto& works) {
        PostOne(works, [&](braid_work** w) { return braid_all_reduce(group_, &buffer, &buffer, r.op, &call, w); });
      });
}

// In place: the root's tensor gets the result; the others' are left as
// braid leaves them (c10d does not define them).
c10::intrusive_ptr<c10d::Work> BraidBackend::reduce(std::vector<at::Tensor>& tensors,
                                                    const c10d::ReduceOptions& opts) {
  const at::Tensor& tensor = Single(tensors, "reduce");
  if (opts.rootTensor != 0) Fail("braid reduce: rootTensor must be 0 (one tensor per call)");
  const Reduction r = ToReduction(opts.reduceOp, tensor.scalar_type(), "reduce");
  const braid_buffer buffer = ToBuffer(tensor, Use::kReduce, "reduce");
  Premultiplied(tensor, r, /*in_place=*/true);
  const int root = static_cast<int>(opts.rootRank);
  const braid_call_options call = CallOptions(opts.timeout, opts.asyncOp);
  return Issue(c10d::OpType::REDUCE, "braid:reduce", tensors, {tensor}, {}, [&](auto& works) {
    PostOne(works, [&](braid_work** w) { return braid_reduce(group_, &buffer, &buffer, r.op, root, &call, w); });
  });
}

// Gathers into one flat temporary, then copies rank r's block to outputs[0][r].
c10::intrusive_ptr<c10d::Work> BraidBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllgatherOptions& opts) {
  const at::Tensor input = Single(inputs, "allgather").contiguous();
  if (outputs.size() != 1) Fail("braid allgather: expects one output list per call");
  std::vector<at::Tensor>& list = outputs[0];
  CheckNumel(static_cast<int64_t>(list.size()), size_, "allgather", "the output list");
  for (const at::Tensor& t : list) {
    CheckLike(t, input, "allgather", "an output");
    CheckNumel(t.numel(), input.numel(), "allgather", "an output");
  }
  at::Tensor flat = at::empty({size_ * input.numel()}, input.options());
  const braid_buffer in = ToBuffer(input, Use::kMove, "allgather");
  const braid_buffer out = ToBuffer(flat, Use::kMove, "allgather");
  std::vector<at::Tensor> copy_to = list;
  const braid_call_options call = CallOptions(opts.timeout, opts.asyncOp);
  return Issue(
      c10d::OpType::ALLGATHER, "braid:all_gather", list, {input, flat},
      [flat, copy_to]() mutable { Unflatten(flat, copy_to); },
      [&](auto& works) {
        PostOne(works, [&](braid_work** w) { return braid_all_gather(group_, &in, &out, &call, w); });
      });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::_allgather_base(at::Tensor& output, at::Tensor& input_tensor,
                                                             const c10d::AllgatherOptions& opts) {
  const at::Tensor input = input_tensor.contiguous();
  CheckLike(output, input, "_allgather_base", "the output");
  CheckNumel(output.numel(), size_ * input.numel(), "_allgather_base", "the output");
  CheckWritable(output, "_allgather_base", "the output");
  const braid_buffer in = ToBuffer(input, Use::kMove, "_allgather_base");
  const braid_buffer out = ToBuffer(output, Use::kMove, "_allgather_base");
  const braid_call_options call = CallOptions(opts.timeout, opts.asyncOp);
  return Issue(c10d::OpType::_ALLGATHER_BASE, "braid:_allgather_base", {output}, {input, output}, {},
               [&](auto& works) {
                 PostOne(works, [&](braid_work** w) { return braid_all_gather(group_, &in, &out, &call, w); });
               });
}

// Several inputs gathered as one flat buffer: rank r's block holds its inputs in order.
c10::intrusive_ptr<c10d::Work> BraidBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                             std::vector<at::Tensor>& inputs,
                                                                             const c10d::AllgatherOptions& opts) {
  const char* name = "allgather_into_tensor_coalesced";
  if (inputs.empty() || inputs.size() != outputs.size()) Fail("braid allgather_into_tensor_coalesced: "
                                                              "as many outputs as inputs, at least one");
  for (size_t i = 0; i < inputs.size(); ++i) {
    CheckLike(inputs[i], inputs[0], name, "an input", "the first");
    CheckLike(outputs[i], inputs[0], name, "an output", "the first input");
    CheckNumel(outputs[i].numel(), size_ * inputs[i].numel(), name, "an output");
  }
  at::Tensor input = Flatten(inputs);
  at::Tensor flat = at::empty({size_ * input.numel()}, input.options());
  const braid_buffer in = ToBuffer(input, Use::kMove, name);
  const braid_buffer out = ToBuffer(flat, Use::kMove, name);
  std::vector<at::Tensor> copy_to = outputs;
  const int size = size_;
  const braid_call_options call = CallOptions(opts.timeout, opts.asyncOp);
  return Issue(
      c10d::OpType::COALESCED, "braid:allgather_into_tensor_coalesced", outputs, {input, flat},
      [flat, copy_to, size]() mutable { FromRankMajor(flat, copy_to, size); },
      [&](auto& works) {
        PostOne(works, [&](braid_work** w) { return braid_all_gather(group_, &in, &out, &call, w); });
      });
}

// outputs[r][i] gets rank r's inputs[i] (torch's layout): gathered as one
// flat buffer (rank r's block holds its inputs in order), then copied out.
c10::intrusive_ptr<c10d::Work> BraidBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) {
  const char* name = "allgather_coalesced";
  if (inputs.empty()) Fail("braid allgather_coalesced: no inputs");
  CheckNumel(static_cast<int64_t>(outputs.size()), size_, name, "the list of output lists");
  std::vector<at::Tensor> flat_outputs;
  for (const std::vector<at::Tensor>& list : outputs) {
    CheckNumel(static_cast<int64_t>(list.size()), static_cast<int64_t>(inputs.size()), name, "an output list");
    for (size_t i = 0; i < inputs.size(); ++i) {
      CheckLike(inputs[i], inputs[0], name, "an input", "the first");
      CheckLike(list[i], inputs[0], name, "an output", "the first input");
      CheckNumel(list[i].numel(), inputs[i].numel(), name, "an output");
      flat_outputs.push_back(list[i]);
    }
  }
  at::Tensor input = Flatten(inputs);
  at::Tensor flat = at::empty({size_ * input.numel()}, input.options());
  const braid_buffer in = ToBuffer(input, Use::kMove, name);
  const braid_buffer out = ToBuffer(flat, Use::kMove, name);
  std::vector<at::Tensor> copy_to = flat_outputs;  // rank-major, as flat is
  const braid_call_options call = CallOptions(opts.timeout, opts.asyncOp);
  return Issue(
      c10d::OpType::ALLGATHER_COALESCED, "braid:allgather_coalesced", flat_outputs, {input, flat},
      [flat, copy_to]() mutable { Unflatten(flat, copy_to); },
      [&](auto& works) {
        PostOne(works, [&](braid_work** w) { return braid_all_gather(group_, &in, &out, &call, w); });
      });
}

// Flattens inputs[0] (one tensor per rank) into a temporary, then reduces and scatters.
c10::intrusive_ptr<c10d::Work> BraidBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                            std::vector<std::vector<at::Tensor>>& inputs,
                                                            const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& output = Single(outputs, "reduce_scatter");
  if (inputs.size() != 1) Fail("braid reduce_scatter: expects one input list per call");
  const std::vector<at::Tensor>& list = inputs[0];
  CheckNumel(static_cast<int64_t>(list.size()), size_, "reduce_scatter", "the input list");
  for (const at::Tensor& t : list) {
    CheckLike(t, output, "reduce_scatter", "an input", "the output");
    CheckNumel(t.numel(), output.numel(), "reduce_scatter", "an input");
  }
  CheckWritable(output, "reduce_scatter", "the output");
  const Reduction r = ToReduction(opts.reduceOp, output.scalar_type(), "reduce_scatter");
  at::Tensor flat = Premultiplied(Flatten(list), r, /*in_place=*/true);
  const braid_buffer in = ToBuffer(flat, Use::kReduce, "reduce_scatter");
  const braid_buffer out = ToBuffer(output, Use::kReduce, "reduce_scatter");
  const braid_call_options call = CallOptions(opts.timeout, opts.asyncOp);
  return Issue(c10d::OpType::REDUCE_SCATTER, "braid:reduce_scatter", outputs, {flat, output}, {}, [&](auto& works) {
    PostOne(works, [&](braid_work** w) { return braid_reduce_scatter(group_, &in, &out, r.op, &call, w); });
  });
}

c10::intrusive_ptr<c10d::Work> BraidBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input_tensor,
                                                                  const c10d::ReduceScatterOptions& opts) {
  const char* name = "_reduce_scatter_base";
  CheckLike(output, input_tensor, name, "the output");
  CheckNumel(input_tensor.numel(), size_ * output.numel(), name, "the input");
  CheckWritable(output, name, "the output");
  const Reduction r = ToReduction(opts.reduceOp, output.scalar_type(), name);
  const at::Tensor input = Premultiplied(input_tensor.contiguous(), r, /*in_place=*/false);
  const braid_buffer in = ToBuffer(input, Use::kReduce, name);
  const braid_buffer out = ToBuffer(output, Use::kReduce, name);
  const braid_call_options call = CallOptions(opts.timeout, opts.asyncOp);
  return Issue(c10d::OpType::_REDUCE_SCATTER_BASE, "braid:_reduce_scatter_base", {output}, {input, output}, {},
               [&](auto& works) {
                 PostOne(works,
                         [&](braid_work** w) { return braid_reduce_scatter(group_, &in, &out, r.op, &call, w); });
               });
}

// Several inputs of size blocks each, reduced and scattered as one
// rank-major buffer, then split into the outputs.
c10::intrusive_ptr<c10d::Work> BraidBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                             std::vector<at::Tensor>& inputs,
                                                                             const c10d::ReduceScatterOptions& opts) {
  const char* name = "reduce_scatter_tensor_coalesced";
  if (inputs.empty() || inputs.size() != outputs.size()) Fail("braid reduce_scatter_tensor_coalesced: "
                                                              "as many outputs as inputs, at least one");
  for (size_t i = 0; i < inputs.size(); ++i) {
    CheckLike(inputs[i], inputs[0], name, "an input", "the first");
    CheckLike(outputs[i], inputs[0], name, "an output", "the first input");
    CheckNumel(inputs[i].numel(), size_ * outputs[i].numel(), name, "an input");
  }
  const Reduction r = ToReduction(opts.reduceOp, inputs[0].scalar_type(), name);
  at::Tensor flat_in = Premultiplied(RankMajor(inputs, size_), r, /*in_place=*/true);
  at::Tensor flat_out = at::empty({flat_in.numel() / size_}, flat_in.options());
  const braid_buffer in = ToBuffer(flat_in, Use::kReduce, name);
  const braid_buffer out = ToBuffer(flat_out, Use::kReduce, name);
  std::vector<at::Tensor> copy_to = outputs;
  const braid_call_options call = CallOptions(opts.timeout, opts.asyncOp);
  return Issue(
      c10d::OpType::COALESCED, "braid:reduce_scatter_tensor_coalesced", outputs, {flat_in, flat_out},
      [flat_out, copy_to]() mutable { Unflatten(flat_out, copy_to); },
      [&](auto& works) {
        PostOne(works, [&](braid_work** w) { return braid_reduce_scatter(group_, &in, &out, r.op, &call, w); });
      });
}

}  // namespace braid_torch
