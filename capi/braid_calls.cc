// The C API's collectives and work handles (capi/braid.h), over the
// Communicator of the group (or of the buffer's device).
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/deadline.h"
#include "capi/braid.h"
#include "capi/handles.h"
#include "collectives/communicator.h"

using braid::capi::Finish;
using braid::capi::Invalid;

extern "C" {

void braid_call_options_init(braid_call_options* call) { *call = braid_call_options{}; }

braid_status braid_all_reduce(braid_group* group, const braid_buffer* in, const braid_buffer* out, braid_op op,
                              const braid_call_options* call, braid_work** work) {
  BRAID_CAPI_ASSIGN(reduce_op, braid::capi::ToOp(op));
  return braid::capi::InOut(group, in, out, call, work, [&](braid::Communicator& comm, auto& i, auto& o, auto& c) {
    return comm.AllReduce(i, o, reduce_op, c);
  });
}

braid_status braid_broadcast(braid_group* group, const braid_buffer* buffer, int root, const braid_call_options* call,
                             braid_work** work) {
  return braid::capi::One(group, buffer, call, work,
                    [&](braid::Communicator& comm, auto& t, auto& c) { return comm.Broadcast(t, root, c); });
}

braid_status braid_reduce(braid_group* group, const braid_buffer* in, const braid_buffer* out, braid_op op, int root,
                          const braid_call_options* call, braid_work** work) {
  BRAID_CAPI_ASSIGN(reduce_op, braid::capi::ToOp(op));
  return braid::capi::InOut(group, in, out, call, work, [&](braid::Communicator& comm, auto& i, auto& o, auto& c) {
    return comm.Reduce(i, o, reduce_op, root, c);
  });
}

braid_status braid_all_gather(braid_group* group, const braid_buffer* in, const braid_buffer* out,
                              const braid_call_options* call, braid_work** work) {
  return braid::capi::InOut(group, in, out, call, work,
                      [&](braid::Communicator& comm, auto& i, auto& o, auto& c) { return comm.AllGather(i, o, c); });
}

braid_status braid_reduce_scatter(braid_group* group, const braid_buffer* in, const braid_buffer* out, braid_op op,
                                  const braid_call_options* call, braid_work** work) {
  BRAID_CAPI_ASSIGN(reduce_op, braid::capi::ToOp(op));
  return braid::capi::InOut(group, in, out, call, work, [&](braid::Communicator& comm, auto& i, auto& o, auto& c) {
    return comm.ReduceScatter(i, o, reduce_op, c);
  });
}

braid_status braid_all_to_all(braid_group* group, const braid_buffer* in, const braid_buffer* out,
                              const braid_call_options* call, braid_work** work) {
  return braid::capi::InOut(group, in, out, call, work,
                      [&](braid::Communicator& comm, auto& i, auto& o, auto& c) { return comm.AllToAll(i, o, c); });
}

braid_status braid_barrier(braid_group* group, const braid_call_options* call, braid_work** work) {
  if (group == nullptr) return Invalid("the group is NULL");
  BRAID_CAPI_ASSIGN(options, braid::capi::ToCallOptions(call));
  return braid::capi::Issue(group->comm().Barrier(options), work);
}

braid_status braid_send(braid_group* group, const braid_buffer* buffer, int peer, const braid_call_options* call,
                        braid_work** work) {
  return braid::capi::One(group, buffer, call, work,
                    [&](braid::Communicator& comm, auto& t, auto& c) { return comm.Send(t, peer, c); });
}

braid_status braid_recv(braid_group* group, const braid_buffer* buffer, int peer, const braid_call_options* call,
                        braid_work** work) {
  return braid::capi::One(group, buffer, call, work,
                    [&](braid::Communicator& comm, auto& t, auto& c) { return comm.Recv(t, peer, c); });
}

braid_status braid_work_test(braid_work* work, int* done) {
  if (work == nullptr) return Invalid("the work handle is NULL");
  const bool finished = work->handle->Test();
  if (done != nullptr) *done = finished ? 1 : 0;
  return finished ? Finish(work->handle->status()) : Finish(absl::OkStatus());
}

int braid_work_source(const braid_work* work) { return work == nullptr ? -1 : work->handle->source_rank(); }

braid_status braid_work_wait(braid_work* work, double timeout_sec) {
  if (work == nullptr) return Invalid("the work handle is NULL");
  const braid::Deadline deadline = timeout_sec < 0 ? absl::InfiniteFuture() : braid::DeadlineIn(absl::Seconds(timeout_sec));
  return Finish(work->handle->Wait(deadline));
}

braid_status braid_work_on_finish(braid_work* work, void (*fn)(void* arg), void* arg) {
  if (work == nullptr) return Invalid("the work handle is NULL");
  if (fn == nullptr) return Invalid("the callback is NULL");
  work->handle->OnFinish([fn, arg] { fn(arg); });
  return Finish(absl::OkStatus());
}

void braid_work_free(braid_work* work) { delete work; }

}  // extern "C"
