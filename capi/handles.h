// The C API's handles and the conversions every entry point shares
// (capi/braid.cc: groups and the reducer; capi/braid_calls.cc: collectives).
// Internal to //capi.
#ifndef BRAID_CAPI_HANDLES_H_
#define BRAID_CAPI_HANDLES_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "capi/braid.h"
#include "collectives/communicator.h"
#include "runtime/process_group.h"
#include "runtime/reducer.h"
#include "tensor/tensor.h"

struct braid_group {
  std::unique_ptr<braid::ProcessGroup> group;  // null for a subgroup
  std::unique_ptr<braid::Communicator> sub;    // a subgroup's communicator
  // Owners in this process (braid_group_retain); the last braid_group_destroy frees it.
  std::atomic<int> references{1};

  braid::Communicator& comm() const { return sub ? *sub : group->comm(); }
};

struct braid_work {
  braid::WorkHandle handle;
};

struct braid_reducer {
  std::unique_ptr<braid::Reducer> reducer;
  std::vector<braid::Reducer::NoSyncScope> no_sync;
};

namespace braid::capi {

// The calling thread's braid_last_error().
std::string& LastError();
// A failed status as the C API returns it (code, and the message for braid_last_error).
braid_status Fail(const absl::Status& status);
// Any status: clears the last error when it is OK.
braid_status Finish(const absl::Status& status);
braid_status Invalid(absl::string_view what);

absl::StatusOr<ReduceOp> ToOp(braid_op op);
// A view of the caller's buffer; `name` says which in errors ("the input").
absl::StatusOr<Tensor> ToTensor(const braid_buffer* buffer, absl::string_view name);
// `count` buffers; the first failure lands in `status`.
std::vector<Tensor> ToTensors(const braid_buffer* buffers, int count, absl::Status& status);
// braid's CallOptions for the C API's (NULL: the defaults).
absl::StatusOr<CallOptions> ToCallOptions(const braid_call_options* call);
// The communicator for `tensor`.
absl::StatusOr<Communicator*> CommFor(braid_group* group, const Tensor& tensor);
// A collective's handle: waited for here when `work` is NULL, else handed out.
braid_status Issue(absl::StatusOr<WorkHandle> handle, braid_work** work);

#define BRAID_CAPI_ASSIGN(lhs, expr)                            \
  auto lhs##_or = (expr);                                       \
  if (!lhs##_or.ok()) return ::braid::capi::Fail(lhs##_or.status()); \
  auto& lhs = *lhs##_or

template <typename Call>
braid_status InOut(braid_group* group, const braid_buffer* in, const braid_buffer* out,
                   const braid_call_options* call_options, braid_work** work, Call call) {
  if (group == nullptr) return Invalid("the group is NULL");
  BRAID_CAPI_ASSIGN(options, ToCallOptions(call_options));
  BRAID_CAPI_ASSIGN(input, ToTensor(in, "the input"));
  BRAID_CAPI_ASSIGN(output, ToTensor(out, "the output"));
  if (input.device() != output.device()) {
    return Invalid(absl::StrCat("the input is on ", ToString(input.device()), ", the output on ",
                                ToString(output.device())));
  }
  BRAID_CAPI_ASSIGN(comm, CommFor(group, input));
  return Issue(call(*comm, input, output, options), work);
}

template <typename Call>
braid_status One(braid_group* group, const braid_buffer* buffer, const braid_call_options* call_options,
                 braid_work** work, Call call) {
  if (group == nullptr) return Invalid("the group is NULL");
  BRAID_CAPI_ASSIGN(options, ToCallOptions(call_options));
  BRAID_CAPI_ASSIGN(tensor, ToTensor(buffer, "the"));
  BRAID_CAPI_ASSIGN(comm, CommFor(group, tensor));
  return Issue(call(*comm, tensor, options), work);
}

}  // namespace braid::capi

#endif  // BRAID_CAPI_HANDLES_H_
