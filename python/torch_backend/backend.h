// braid as a torch 2.x c10d::Backend ("braid"): torch's ProcessGroup
// dispatches each operation on CPU and CUDA tensors here; every one is issued
// through braid's C API (libbraid.so), so a process that also uses the plain
// Python package holds one braid runtime.
//
// Contract, as c10d's backends have it:
//   - Every operation returns a BraidWork at once; one completion thread per
//     backend completes them in issue order (work.h). async_op=True never
//     runs on the caller's thread; a blocking call of 64 KiB or less on an
//     idle group may (BRAID_INLINE_BYTES), which is most of an 8-byte
//     all-reduce's time saved.
//   - Nothing waits forever: every operation has a deadline, the call's own
//     timeout (c10d's option structs), else the backend's (setTimeout, the
//     creator's), else BRAID_TIMEOUT_SEC. A failed collective aborts braid's
//     communicator, so later ones fail at once with the first cause.
//   - Tensors that are written must be contiguous; tensors that are only
//     read are made contiguous (a copy) when they are not.
//   - Point to point matches sends and receives between two ranks in issue
//     order (as MPI does for one tag): any tag is accepted, and a program
//     that relies on tags to reorder messages between one pair of ranks is
//     not supported. recvAnysource polls the peers (shm, tcp, mpi).
//   - gather and scatter ride on all-gather and broadcast (every rank moves
//     the whole); all-to-all with uneven splits on point-to-point pairs.
#ifndef BRAID_PYTHON_TORCH_BACKEND_BACKEND_H_
#define BRAID_PYTHON_TORCH_BACKEND_BACKEND_H_

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "capi/braid.h"
#include "python/torch_backend/store_ops.h"
#include "python/torch_backend/work.h"

namespace braid_torch {

class BraidBackend final : public c10d::Backend {
 public:
  // Collective over the group's ranks: rendezvous over `store`, then braid's
  // transports. timeout_sec <= 0: BRAID_TIMEOUT_SEC. Blocks until the group
  // is up or the deadline; throws braid's error.
  static c10::intrusive_ptr<BraidBackend> Create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                 int world_size, double timeout_sec);
  // A second owner of a braid group this process already holds (braid.init()'s,
  // or the same torch group's backend for another device): no rendezvous, the
  // same connections. Not collective. `store` (torch's, for monitored_barrier) may be null.
  static c10::intrusive_ptr<BraidBackend> Share(braid_group* group, c10::intrusive_ptr<c10d::Store> store,
                                                double timeout_sec);
  BraidBackend(braid_group* group, int rank, int size, c10::intrusive_ptr<c10d::Store> store,
               double timeout_sec);
  // Finishes what was issued (each bounded by its deadline), then frees the
  // braid group. Drops the GIL while it waits: a Future callback on the
  // completion thread may need it.
  ~BraidBackend() override;

  const std::string getBackendName() const override { return "braid"; }
  // "shm", "tcp", ...: what carries this group's CPU buffers.
  const std::string& transport() const { return transport_; }
  // The braid group, as an integer for braid._braid.Group._adopt (one process, one libbraid.so).
  uintptr_t group_handle() const { return reinterpret_cast<uintptr_t>(group()); }

  void setTimeout(std::chrono::milliseconds timeout) override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  // Fails every pending and later operation here and on the peers.
  void abort() override;
  // torch's split_group: collective over the ranks in `ranks` (this group's,
  // in their new order), a new braid group over `store` (torch's prefix
  // store for the split); null on a rank not among them, which takes no part.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  // What split_group hands back to split: the name and this group's timeout.
  c10::intrusive_ptr<Options> getBackendOptions() override;
  // Finishes what was issued and frees braid's group; later calls fail.
  void shutdown() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // Every rank checks in through the store; rank 0 names each rank that did
  // not arrive within the timeout (the first, or all with wait_all_ranks).
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

 private:
  // Posts braid operations; each handle goes into the list.
  using Post = std::function<void(std::vector<braid_work*>&)>;

  // Issues one operation: `post` posts its braid calls, queued for the
  // completion thread under one lock, so the queue's order is braid's issue
  // order even when several threads issue. Throws braid's error if a call
  // is refused (a bad argument, or a group already aborted).
  c10::intrusive_ptr<c10d::Work> Issue(c10d::OpType type, const char* title, std::vector<at::Tensor> outputs,
                                       std::vector<at::Tensor> keep_alive, std::function<void()> on_success,
                                       const Post& post);
  // braid's call options for c10d's per-call timeout and async flag.
  braid_call_options CallOptions(std::chrono::milliseconds timeout, bool async) const;
  // A receive of tensors[0] from `src` (BRAID_ANY_SOURCE: whichever peer sends first).
  c10::intrusive_ptr<c10d::Work> Receive(std::vector<at::Tensor>& tensors, int src, c10d::OpType type,
                                         const char* title);
  // Posts send/recv pairs with every peer, in an order no two ranks can
  // deadlock on: `send_to[p]` to and `recv_from[p]` from rank p (empty: none).
  void PostExchange(const std::vector<at::Tensor>& send_to, const std::vector<at::Tensor>& recv_from,
                    const braid_call_options& call, std::vector<braid_work*>& works) const;
  braid_group* group() const;

  const c10::intrusive_ptr<c10d::Store> store_;
  braid_group* group_ = nullptr;  // owned by the completion thread, which destroys it last
  const std::string transport_;
  const std::shared_ptr<Completion> completion_;
  std::thread thread_;
  std::atomic<double> timeout_sec_;  // <= 0: the group's
  std::atomic<uint64_t> seq_{0};
  std::atomic<uint64_t> monitored_barriers_{0};
  // Guarded by completion_->mu.
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<BraidWork>> coalesced_;
  bool shut_down_ = false;
};

// Throws braid's last error unless `status` is BRAID_OK.
void Check(braid_status status);

// Posts one braid call, `call(&handle)`, and keeps its handle.
template <typename Call>
void PostOne(std::vector<braid_work*>& works, Call call) {
  braid_work* work = nullptr;
  Check(call(&work));
  works.push_back(work);
}

}  // namespace braid_torch

#endif  // BRAID_PYTHON_TORCH_BACKEND_BACKEND_H_
